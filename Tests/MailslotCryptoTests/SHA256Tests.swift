import Testing
@testable import MailslotCrypto

/// SHA-256 (FIPS 180-2 examples) and HMAC-SHA-256 (RFC 4231) over libsodium, one-shot and
/// streamed in uneven pieces: the object-store signer (SigV4) rests on them.
@Suite struct SHA256Tests {
    static let digests: [(message: [UInt8], digest: String)] = [
        ([], "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
        (Array("abc".utf8), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
        (Array("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8),
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"),
    ]

    @Test func oneShotMatchesFIPSExamples() {
        for (message, digest) in Self.digests {
            #expect(sha256(message) == hex(digest))
            #expect(message.withUnsafeBytes { sha256($0) } == hex(digest))
        }
    }

    /// A million `a`s in pieces of every size from 1 to 997 bytes give FIPS 180-2's third digest.
    @Test func streamingOverUnevenPieces() {
        let hasher = SHA256Hasher()
        let million = [UInt8](repeating: UInt8(ascii: "a"), count: 1_000_000)
        var offset = 0
        var size = 1
        while offset < million.count {
            let end = min(offset + size, million.count)
            million[offset..<end].withUnsafeBytes { hasher.update($0) }
            offset = end
            size = size % 997 + 1
        }
        #expect(hasher.finalize() == hex("cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"))

        let empty = SHA256Hasher()
        #expect(empty.finalize() == sha256([]))
    }

    /// RFC 4231 cases 1, 2 and 6 (a 131-byte key, longer than the block: hashed first), streamed
    /// and through the one-shot function the ratchets use.
    @Test func hmacMatchesRFC4231() {
        let cases: [(key: [UInt8], data: [UInt8], mac: String)] = [
            ([UInt8](repeating: 0x0B, count: 20), Array("Hi There".utf8),
             "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"),
            (Array("Jefe".utf8), Array("what do ya want for nothing?".utf8),
             "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"),
            ([UInt8](repeating: 0xAA, count: 131), Array("Test Using Larger Than Block-Size Key - Hash Key First".utf8),
             "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"),
        ]
        for (key, data, mac) in cases {
            #expect(hmacSHA256(key: key, data) == hex(mac))
            let streamed = HMACSHA256(key: key)
            streamed.update(Array(data.prefix(5)))
            streamed.update(Array(data.dropFirst(5)))
            #expect(streamed.finalize() == hex(mac))
            let raw = key.withUnsafeBytes { HMACSHA256(key: $0) }
            raw.update(data)
            #expect(raw.finalize() == hex(mac))
        }
        // An empty key is a key (RFC 2104 pads it with zeros), not an error.
        #expect(HMACSHA256(key: []).finalize().count == 32)
    }
}
