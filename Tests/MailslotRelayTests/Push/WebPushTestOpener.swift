import Crypto
import Foundation
@testable import MailslotRelay

/// The user agent's side of RFC 8291, for tests only: opens an `aes128gcm` body with the
/// subscription's private key and `auth` secret, and strips the padding as RFC 8188 §2 says.
/// Written from the RFC, apart from ``WebPushCipher`` (which only seals), so that each checks the other.
enum WebPushTestOpener {
    enum Failure: Error { case header, decrypt, padding }

    static func open(_ body: [UInt8], privateKey: P256.KeyAgreement.PrivateKey, auth: [UInt8]) throws -> [UInt8] {
        guard body.count > 21 else { throw Failure.header }
        let salt = Array(body[0..<16])
        let idlen = Int(body[20])
        guard body.count >= 21 + idlen + 16 else { throw Failure.header }
        let asPublic = Array(body[21..<(21 + idlen)])
        let ciphertext = Array(body[(21 + idlen)...])
        let uaPublic = Array(privateKey.publicKey.x963Representation)
        let shared = try privateKey.sharedSecretFromKeyAgreement(with: P256.KeyAgreement.PublicKey(x963Representation: asPublic))
        let ikm = shared.hkdfDerivedSymmetricKey(using: Crypto.SHA256.self, salt: auth,
                                                 sharedInfo: Array("WebPush: info\0".utf8) + uaPublic + asPublic, outputByteCount: 32)
        let cek = HKDF<Crypto.SHA256>.deriveKey(inputKeyMaterial: ikm, salt: salt, info: Array("Content-Encoding: aes128gcm\0".utf8), outputByteCount: 16)
        let nonce = HKDF<Crypto.SHA256>.deriveKey(inputKeyMaterial: ikm, salt: salt, info: Array("Content-Encoding: nonce\0".utf8), outputByteCount: 12)
            .withUnsafeBytes { Array($0) }
        let box = try AES.GCM.SealedBox(nonce: AES.GCM.Nonce(data: nonce), ciphertext: ciphertext.dropLast(16), tag: ciphertext.suffix(16))
        let plain: [UInt8]
        do { plain = Array(try AES.GCM.open(box, using: cek)) } catch { throw Failure.decrypt }
        // The last record ends with 0x02 followed only by zeros.
        guard let delimiter = plain.lastIndex(where: { $0 != 0 }), plain[delimiter] == 0x02 else { throw Failure.padding }
        return Array(plain[..<delimiter])
    }
}
