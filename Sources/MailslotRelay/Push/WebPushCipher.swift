import Crypto
import Foundation

// The Web Push payload encryption (RFC 8291 over RFC 8188's `aes128gcm`), pure. A wake-up's
// plaintext is only the registration's tag, padded so that every body is 166 bytes whatever the
// tag: the push service learns nothing from the length. spec/push.md §5.1, docs/design/wakeups.md §4.1.

/// Encrypts Web Push payloads for one subscription (its `p256dh` key and `auth` secret).
struct WebPushCipher: Sendable {
    /// Why a subscription's keys cannot be used.
    enum Failure: Error, Equatable {
        /// `p256dh` is not an uncompressed P-256 point on the curve (65 bytes, `0x04 ‖ x ‖ y`).
        case invalidPublicKey
        /// `auth` is not 16 bytes.
        case invalidAuthSecret
        /// The tag is longer than ``maxTagBytes``.
        case tagTooLong
    }

    /// The record size written in the header: RFC 8291 §4 asks for a single record, and 4 096 is
    /// what every push service and http_ece read.
    static let recordSize: UInt32 = 4096
    /// The longest tag a wake-up carries (spec/push.md §2).
    static let maxTagBytes = 48
    /// The padded plaintext: 48 bytes of tag room, the last-record delimiter, zeros.
    static let paddedPlaintextBytes = 64
    /// salt(16) ‖ rs(4) ‖ idlen(1) ‖ as_public(65) ‖ ciphertext(64) ‖ GCM tag(16).
    static let wakeBodyBytes = 166

    /// The user agent's public key, `ua_public` (65 bytes).
    let userAgentPublicKey: P256.KeyAgreement.PublicKey
    /// Its raw form, as hashed into the key derivation.
    private let userAgentPublicBytes: [UInt8]
    /// The subscription's `auth` secret (16 bytes).
    private let authSecret: [UInt8]

    /// Checks the subscription's keys: `p256dh` must be a point on the curve (RFC 8291 §7).
    init(p256dh: [UInt8], auth: [UInt8]) throws(Failure) {
        guard p256dh.count == 65, p256dh.first == 0x04,
              let key = try? P256.KeyAgreement.PublicKey(x963Representation: p256dh)
        else { throw .invalidPublicKey }
        guard auth.count == 16 else { throw .invalidAuthSecret }
        userAgentPublicKey = key
        userAgentPublicBytes = p256dh
        authSecret = auth
    }

    /// The 166-byte body of a wake-up carrying `tag`, with a fresh ephemeral key and salt.
    func wakeBody(tag: String) throws(Failure) -> [UInt8] {
        var salt = [UInt8](repeating: 0, count: 16)
        var generator = SystemRandomNumberGenerator()
        for index in salt.indices { salt[index] = generator.next() }
        return try wakeBody(tag: tag, ephemeralKey: P256.KeyAgreement.PrivateKey(), salt: salt)
    }

    /// The wake-up body with a given ephemeral key and salt. Only tests and vectors choose them:
    /// reusing either for two messages would break the encryption.
    func wakeBody(tag: String, ephemeralKey: P256.KeyAgreement.PrivateKey, salt: [UInt8]) throws(Failure) -> [UInt8] {
        let tagBytes = Array(tag.utf8)
        guard tagBytes.count <= Self.maxTagBytes else { throw .tagTooLong }
        // RFC 8188 §2: the padding delimiter 0x02 marks the last record, then zeros.
        var plaintext = tagBytes
        plaintext.append(0x02)
        plaintext.append(contentsOf: repeatElement(0, count: Self.paddedPlaintextBytes - plaintext.count))
        return seal(record: plaintext, ephemeralKey: ephemeralKey, salt: salt)
    }

    /// Encrypts one record exactly as given (already padded and delimited) — RFC 8291's single
    /// record. The Appendix A test uses it with the RFC's plaintext.
    func seal(record: [UInt8], ephemeralKey: P256.KeyAgreement.PrivateKey, salt: [UInt8]) -> [UInt8] {
        precondition(salt.count == 16, "an aes128gcm salt is 16 bytes")
        let asPublic = Array(ephemeralKey.publicKey.x963Representation)
        // The peer key was checked at init, so the agreement cannot fail.
        let shared = try! ephemeralKey.sharedSecretFromKeyAgreement(with: userAgentPublicKey)
        // RFC 8291 §3.4: key_info = "WebPush: info" ‖ 0x00 ‖ ua_public ‖ as_public.
        let keyInfo = Array("WebPush: info".utf8) + [0] + userAgentPublicBytes + asPublic
        let ikm = shared.hkdfDerivedSymmetricKey(using: Crypto.SHA256.self, salt: authSecret,
                                                 sharedInfo: keyInfo, outputByteCount: 32)
        // RFC 8188 §2.2–2.3: the content key and the nonce from the salt and IKM.
        let cek = HKDF<Crypto.SHA256>.deriveKey(inputKeyMaterial: ikm, salt: salt,
                                                 info: Array("Content-Encoding: aes128gcm".utf8) + [0], outputByteCount: 16)
        let nonceBytes = HKDF<Crypto.SHA256>.deriveKey(inputKeyMaterial: ikm, salt: salt,
                                                        info: Array("Content-Encoding: nonce".utf8) + [0], outputByteCount: 12)
            .withUnsafeBytes { Array($0) }
        // A 12-byte nonce and a 16-byte key are always accepted: these cannot throw.
        let sealed = try! AES.GCM.seal(record, using: cek, nonce: AES.GCM.Nonce(data: nonceBytes))
        var body = salt
        body += withUnsafeBytes(of: Self.recordSize.bigEndian) { Array($0) }
        body.append(UInt8(asPublic.count))
        body += asPublic
        body += sealed.ciphertext
        body += sealed.tag
        return body
    }
}
