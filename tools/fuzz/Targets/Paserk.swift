// Fuzz target `paserk`: the PASERK readers (Sources/MailslotCrypto/Paseto/Paserk.swift) of
// `k4.public`, `k4.secret` and `k4.local`, and the strict base64url underneath them
// (Primitives/Base64URL.swift). The whole input is one string; every reader sees it.
//
// What must hold: a string any reader accepts is exactly the canonical writing of the key it
// read (no second spelling of a key exists), its id has the `k4.pid`/`k4.sid`/`k4.lid` shape, a
// string of another type is refused as the wrong type, and base64url decoding is canonical.

import Foundation
import MailslotWire

@_cdecl("LLVMFuzzerTestOneInput")
public func paserkOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let input = bytes(data, size)
    let text = String(decoding: input, as: UTF8.self)

    check(text, prefix: "k4.public.", { () throws(PaserkError) in try IdentityPublicKey(paserk: text) }) { key in
        (key.paserk, key.paserkID, "k4.pid.")
    }
    check(text, prefix: "k4.secret.", { () throws(PaserkError) in try IdentityKeyPair(paserk: text) }) { pair in
        (pair.paserk, pair.paserkSecretID, "k4.sid.")
    }
    check(text, prefix: "k4.local.", { () throws(PaserkError) in try SymmetricKey(paserk: text) }) { key in
        (key.paserk, key.paserkID, "k4.lid.")
    }

    // Base64url: whatever decodes re-encodes to the same text, and any bytes survive a round trip.
    // The relay's check of envelope text must accept exactly what decoding accepts.
    expect(Base64URL.decodedCount(text) == Base64URL.decode(text)?.count, "decodedCount disagrees with decode")
    if let decoded = Base64URL.decode(text) {
        expect(Base64URL.encode(decoded) == text, "base64url accepted a non-canonical encoding")
    }
    expect(Base64URL.decode(Base64URL.encode(input)) == input, "base64url did not round-trip \(input.count) bytes")
    return 0
}

/// Reads `text` with `read` and checks the outcome against its `prefix`.
private func check<Key>(_ text: String, prefix: String, _ read: () throws(PaserkError) -> Key,
                        _ describe: (Key) -> (paserk: String, id: String, idPrefix: String)) {
    do {
        let written = describe(try read())
        expect(written.paserk == text, "\(prefix) accepted a string that is not its key's canonical writing")
        // An id is the prefix and base64url of 33 bytes: 44 characters.
        expect(written.id.hasPrefix(written.idPrefix) && written.id.utf8.count == written.idPrefix.utf8.count + 44,
               "a \(written.idPrefix) id has the wrong shape")
    } catch .wrongType {
        expect(!text.hasPrefix(prefix), "\(prefix) refused its own type as the wrong type")
    } catch {
        expect(text.hasPrefix(prefix), "\(prefix) refused another type for its key material")
    }
}

/// Every PASERK of the official k4 vectors (valid and invalid), and the issuer keys of
/// spec/vectors/tokens.json.
func fuzzSeeds(root: String) -> [(name: String, bytes: [UInt8])] {
    var seeds: [(name: String, bytes: [UInt8])] = []
    for type in ["public", "secret", "local", "pid", "sid", "lid"] {
        let vectors = Seeds.json(root, "Tests/MailslotCryptoTests/Fixtures/paseto/k4.\(type).json")
        for (index, test) in Seeds.list(vectors, "tests").enumerated() {
            if let paserk = test["paserk"] as? String { seeds.append(("\(type)-\(index)", Array(paserk.utf8))) }
        }
    }
    if let issuer = Seeds.json(root, "spec/vectors/tokens.json")["issuer"] as? [String: Any] {
        for (name, value) in issuer { if let text = value as? String { seeds.append(("issuer-\(name)", Array(text.utf8))) } }
    }
    seeds.append(("local-fixed", Array(Fixed.localKey.paserk.utf8)))
    return seeds
}
