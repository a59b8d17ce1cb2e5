import Foundation

/// A file sent as a blob, as a chat message carries it in `payload.files` (spec/attachments.md
/// §3): which blob, the key and digest that open it, its sizes, and what the sender says it is.
///
/// Every value of this type is valid: the initialiser and the decoder check every member and
/// bound, so a sealer cannot write, and a reader cannot accept, a reference that breaks §3.
/// The reference holds the file's key: it travels only inside a sealed message.
public struct FileReference: Sendable, Equatable, Codable {
    /// The most files one message carries.
    public static let maxPerMessage = 32
    /// The longest `media_type` and `name`, in UTF-8 bytes.
    public static let maxLabelBytes = 255

    /// The blob's id on the relay (spec/attachments.md §3: `[A-Za-z0-9_-]{16,64}`).
    public let blob: String
    /// The file's key.
    public let key: FileKey
    /// BLAKE2b-256 of the whole ciphertext.
    public let digest: FileDigest
    /// The ciphertext's length in bytes: always ``FileCipher/size(plainSize:)`` of ``plainSize``.
    public let size: Int64
    /// The file's length in bytes, 0…2^40.
    public let plainSize: Int64
    /// The media type the sender gives, e.g. `video/mp4`: a label, never trusted.
    public let mediaType: String
    /// The file name the sender gives, as they gave it: receivers sanitise it before any use.
    public let name: String?
    /// A small picture to show before the file is downloaded, if the sender made one.
    public let preview: FilePreview?

    /// What opening the file needs (key, digest, sizes).
    public var sealed: SealedFile { SealedFile(key: key, digest: digest, size: size, plainSize: plainSize) }

    /// A reference to blob `blob` holding the file `sealed` describes; throws
    /// ``EnvelopeError/invalidBody(_:)`` when a member breaks §3 (a blob id's grammar, a size that
    /// is not the plain size's, a media type or name out of bounds).
    public init(blob: String, sealed: SealedFile, mediaType: String, name: String? = nil, preview: FilePreview? = nil) throws(EnvelopeError) {
        guard Identifier.isValidBlobID(blob) else { throw .invalidBody("files[].blob is not a blob id ([A-Za-z0-9_-]{16,64})") }
        guard (0...FileCipher.maxPlainSize).contains(sealed.plainSize) else { throw .invalidBody("files[].plain_size is not within 0…2^40") }
        guard FileCipher.size(plainSize: sealed.plainSize) == sealed.size else {
            throw .invalidBody("files[].size is not the ciphertext size of plain_size")
        }
        guard MediaType.isValid(mediaType) else { throw .invalidBody("files[].media_type is not a type/subtype of RFC 6838 names") }
        if let name, !(1...Self.maxLabelBytes).contains(name.utf8.count) {
            throw .invalidBody("files[].name must be 1 to \(Self.maxLabelBytes) bytes")
        }
        self.blob = blob
        (key, digest, size, plainSize) = (sealed.key, sealed.digest, sealed.size, sealed.plainSize)
        self.mediaType = mediaType
        self.name = name
        self.preview = preview
    }

    enum CodingKeys: String, CodingKey {
        case blob, key, digest, size, name, preview
        case plainSize = "plain_size"
        case mediaType = "media_type"
    }

    /// Decodes a reference, checking every member (spec/attachments.md §3); a member that breaks
    /// a rule throws ``EnvelopeError/invalidBody(_:)`` naming it. Members it does not know are
    /// ignored, as in the chat message's other objects.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        guard let keyBytes = Base64URL.decode(try container.decode(String.self, forKey: .key)),
              let key = FileKey(bytes: SecretBytes(copying: keyBytes)) else {
            throw EnvelopeError.invalidBody("files[].key is not 32 bytes of strict base64url")
        }
        guard let digestBytes = Base64URL.decode(try container.decode(String.self, forKey: .digest)),
              let digest = FileDigest(bytes: digestBytes) else {
            throw EnvelopeError.invalidBody("files[].digest is not 32 bytes of strict base64url")
        }
        let sealed = SealedFile(key: key, digest: digest, size: try container.decode(Int64.self, forKey: .size),
                                plainSize: try container.decode(Int64.self, forKey: .plainSize))
        try self.init(blob: try container.decode(String.self, forKey: .blob), sealed: sealed,
                      mediaType: try container.decode(String.self, forKey: .mediaType),
                      name: try container.decodeIfPresent(String.self, forKey: .name),
                      preview: try container.decodeIfPresent(FilePreview.self, forKey: .preview))
    }

    /// Encodes the reference, binary members as unpadded base64url.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(blob, forKey: .blob)
        try container.encode(key.bytes.withUnsafeBytes { Base64URL.encode($0) }, forKey: .key)
        try container.encode(Base64URL.encode(digest.bytes), forKey: .digest)
        try container.encode(size, forKey: .size)
        try container.encode(plainSize, forKey: .plainSize)
        try container.encode(mediaType, forKey: .mediaType)
        try container.encodeIfPresent(name, forKey: .name)
        try container.encodeIfPresent(preview, forKey: .preview)
    }
}

/// A small inline picture of a file (a thumbnail, a poster frame), shown before the download.
public struct FilePreview: Sendable, Equatable, Codable {
    /// The most bytes a preview holds.
    public static let maxBytes = 4096

    /// The preview's media type, e.g. `image/jpeg`: a label, never trusted.
    public let mediaType: String
    /// The preview's bytes (unpadded base64url on the wire), 1…4 096.
    public let data: [UInt8]

    /// A preview; throws ``EnvelopeError/invalidBody(_:)`` for an invalid media type or data
    /// that is empty or over ``maxBytes``.
    public init(mediaType: String, data: [UInt8]) throws(EnvelopeError) {
        guard MediaType.isValid(mediaType) else { throw .invalidBody("files[].preview.media_type is not a type/subtype of RFC 6838 names") }
        guard (1...Self.maxBytes).contains(data.count) else { throw .invalidBody("files[].preview.data must be 1 to \(Self.maxBytes) bytes") }
        self.mediaType = mediaType
        self.data = data
    }

    enum CodingKeys: String, CodingKey {
        case mediaType = "media_type", data
    }

    /// Decodes a preview and checks it.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        // Refused by length before decoding, so that a huge string costs no large allocation.
        let text = try container.decode(String.self, forKey: .data)
        guard text.utf8.count <= (Self.maxBytes * 4 + 2) / 3, let data = Base64URL.decode(text) else {
            throw EnvelopeError.invalidBody("files[].preview.data is not strict base64url of at most \(Self.maxBytes) bytes")
        }
        try self.init(mediaType: try container.decode(String.self, forKey: .mediaType), data: data)
    }

    /// Encodes the preview, its data as unpadded base64url.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(mediaType, forKey: .mediaType)
        try container.encode(Base64URL.encode(data), forKey: .data)
    }
}

/// The media types a file reference may name: `type/subtype`, each an RFC 6838 §4.2
/// restricted name, no parameters, at most 255 bytes in all.
enum MediaType {
    static func isValid(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        guard bytes.count <= FileReference.maxLabelBytes, let slash = bytes.firstIndex(of: UInt8(ascii: "/")) else { return false }
        return isRestrictedName(bytes[..<slash]) && isRestrictedName(bytes[(slash + 1)...])
    }

    /// `restricted-name = restricted-name-first *126restricted-name-chars`.
    private static func isRestrictedName(_ name: ArraySlice<UInt8>) -> Bool {
        guard let first = name.first, (1...127).contains(name.count), isAlphanumeric(first) else { return false }
        return name.allSatisfy { isAlphanumeric($0) || "!#$&-^_.+".utf8.contains($0) }
    }

    private static func isAlphanumeric(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
            || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
    }
}
