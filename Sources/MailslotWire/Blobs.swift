import Foundation

// Blobs: encrypted files held by the relay for their recipients, uploaded in fixed parts and
// erased once every recipient has acknowledged them. The file format is spec/attachments.md
// (``FileCipher``); the endpoints are spec/protocol.md §4.15–§4.21.

/// `POST /v1/blobs`: create a blob, before its parts are uploaded.
public struct BlobCreateRequest: Sendable, Equatable, Codable {
    /// The client-chosen blob id (``Identifier/isValidBlobID(_:)``; writers use ``BlobLayout/newID()``).
    public let id: String
    /// The ciphertext bytes the blob will hold (``FileCipher/isValidSize(_:)``).
    public let size: Int64
    /// The uids that may read and must acknowledge it: 1 … the relay's limit, no repeats.
    public let recipients: [String]
    /// Its lifetime once complete, in seconds; the relay's message default when absent.
    public let ttlSeconds: Int64?

    /// A create request.
    public init(id: String, size: Int64, recipients: [String], ttlSeconds: Int64? = nil) {
        self.id = id
        self.size = size
        self.recipients = recipients
        self.ttlSeconds = ttlSeconds
    }

    enum CodingKeys: String, CodingKey {
        case id, size, recipients
        case ttlSeconds = "ttl_seconds"
    }
}

/// Where a blob is in its life.
public enum BlobState: String, Sendable, Codable, CaseIterable {
    /// Parts are still missing; only the author may upload them, no one may download.
    case uploading
    /// Every part is stored: recipients may download and acknowledge.
    case complete
}

/// Whose blobs a list asks for: `GET /v1/users/{uid}/blobs?role=…`.
public enum BlobRole: String, Sendable, Codable, CaseIterable {
    /// Blobs the uid uploaded.
    case author
    /// Blobs the uid may read and has not acknowledged.
    case recipient
}

/// What the relay tells of a blob (`GET /v1/blobs/{id}` and the answers of create and part
/// uploads). `received` and `recipients` only for its author: a recipient learns no one else.
public struct BlobRecord: Sendable, Equatable, Codable {
    /// The blob id.
    public let id: String
    /// The uid that created it, stamped by the relay.
    public let author: String
    /// Ciphertext bytes.
    public let size: Int64
    /// Bytes per part (every part but the last is this long).
    public let partSize: Int64
    /// The number of parts, `ceil(size / part_size)`.
    public let parts: Int
    /// Uploading or complete.
    public let state: BlobState
    /// When the relay created it (RFC 3339).
    public let createdAt: String
    /// When the relay erases it if not every recipient has acknowledged it (RFC 3339); complete blobs.
    public let expiresAt: String?
    /// When the relay erases the unfinished upload (RFC 3339); uploading blobs.
    public let uploadExpiresAt: String?
    /// The part numbers stored so far, ascending; author only, while uploading.
    public let received: [Int]?
    /// The recipients that have not acknowledged it yet, sorted; author only.
    public let recipients: [String]?

    /// A record with all its fields.
    public init(id: String, author: String, size: Int64, partSize: Int64, parts: Int, state: BlobState,
                createdAt: String, expiresAt: String?, uploadExpiresAt: String?, received: [Int]?, recipients: [String]?) {
        self.id = id
        self.author = author
        self.size = size
        self.partSize = partSize
        self.parts = parts
        self.state = state
        self.createdAt = createdAt
        self.expiresAt = expiresAt
        self.uploadExpiresAt = uploadExpiresAt
        self.received = received
        self.recipients = recipients
    }

    enum CodingKeys: String, CodingKey {
        case id, author, size, parts, state, received, recipients
        case partSize = "part_size", createdAt = "created_at", expiresAt = "expires_at", uploadExpiresAt = "upload_expires_at"
    }

    /// Decodes a record, refusing (``OutOfRange``) what no relay sends: an id or author outside
    /// its grammar, a size that is no ciphertext size, a part size or count that does not fit the
    /// size, part numbers out of range.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        id = try container.decode(String.self, forKey: .id, Grammar.blobID, Identifier.isValidBlobID)
        author = try container.decode(String.self, forKey: .author, Grammar.uid, Identifier.isValidUID)
        size = try container.decode(Int64.self, forKey: .size, in: 1...Int64.max)
        guard FileCipher.isValidSize(size) else { throw OutOfRange(CodingKeys.size.stringValue, "\(size)", "a file ciphertext size") }
        partSize = try container.decode(Int64.self, forKey: .partSize, in: 1...Int64.max)
        parts = try container.decode(Int.self, forKey: .parts, in: 1...BlobLayout.maxParts)
        guard BlobLayout(size: size, partSize: partSize)?.parts == parts else {
            throw OutOfRange(CodingKeys.parts.stringValue, "\(parts)", "ceil(size / part_size)")
        }
        state = try container.decode(BlobState.self, forKey: .state)
        createdAt = try container.decode(String.self, forKey: .createdAt, Grammar.time, Grammar.isTime)
        expiresAt = try container.decodeIfPresent(String.self, forKey: .expiresAt, Grammar.time, Grammar.isTime)
        uploadExpiresAt = try container.decodeIfPresent(String.self, forKey: .uploadExpiresAt, Grammar.time, Grammar.isTime)
        let numbers = 1...parts
        received = try container.decodeIfPresent([Int].self, forKey: .received)
        if let received, !received.allSatisfy({ numbers.contains($0) }) || received.count > numbers.count {
            throw OutOfRange(CodingKeys.received.stringValue, "\(received.count) numbers", "part numbers 1 … \(numbers.count)")
        }
        recipients = try container.decodeIfPresent([String].self, forKey: .recipients)
        if let recipients, !recipients.allSatisfy(Identifier.isValidUID) {
            throw OutOfRange(CodingKeys.recipients.stringValue, "\(recipients.count) entries", "uids")
        }
    }
}

/// `GET /v1/users/{uid}/blobs`: one page of blobs by id.
public struct BlobPage: Sendable, Equatable, Codable {
    /// The blobs, by id.
    public let blobs: [BlobRecord]
    /// The cursor of the next page (the last id), or nil on the last page.
    public let next: String?

    /// A page.
    public init(blobs: [BlobRecord], next: String?) {
        self.blobs = blobs
        self.next = next
    }

    enum CodingKeys: String, CodingKey { case blobs, next }

    /// `next` is always present, `null` on the last page (as in ``MessagePage``).
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(blobs, forKey: .blobs)
        try container.encode(next, forKey: .next)
    }
}

/// How a blob of `size` ciphertext bytes is cut into parts of `partSize`: part `n` (1-based)
/// covers bytes `[(n−1)·partSize, min(n·partSize, size))`. Relay and client compute it alike.
public struct BlobLayout: Sendable, Equatable {
    /// The most parts a blob may have (S3's limit for one multipart upload).
    public static let maxParts = 10_000
    /// The header that carries a part's BLAKE2b-256 digest, unpadded base64url of 32 bytes.
    public static let digestHeader = "Mailslot-Digest"

    /// Ciphertext bytes.
    public let size: Int64
    /// Bytes per part.
    public let partSize: Int64

    /// The layout, or nil when `size` or `partSize` is not positive or the parts would be more
    /// than ``maxParts``.
    public init?(size: Int64, partSize: Int64) {
        guard size > 0, partSize > 0, (size - 1) / partSize + 1 <= Int64(Self.maxParts) else { return nil }
        self.size = size
        self.partSize = partSize
    }

    /// The number of parts.
    public var parts: Int { Int((size - 1) / partSize + 1) }

    /// The byte range of part `number` (1 … ``parts``), or nil for a number outside them.
    public func range(ofPart number: Int) -> Range<Int64>? {
        guard (1...parts).contains(number) else { return nil }
        let start = Int64(number - 1) * partSize
        return start..<min(start + partSize, size)
    }

    /// A fresh random blob id: 22 characters, 16 random bytes in base64url.
    public static func newID() -> String { Base64URL.encode(randomBytes(16)) }
}
