import Foundation
import Testing
@testable import MailslotCrypto

/// Every official PASETO v4 and PASERK k4 vector, the expect-fail ones included.
@Suite struct OfficialVectorTests {
    @Test func pasetoV4() throws {
        let tests = try Fixtures.officialTests("v4.json")
        #expect(tests.count == 17)
        for test in tests {
            let name = test["name"] as! String
            let token = test["token"] as! String
            let footer = Array((test["footer"] as! String).utf8)
            let implicit = Array((test["implicit-assertion"] as! String).utf8)
            let expectFail = test["expect-fail"] as! Bool
            if let keyHex = test["key"] as? String {  // v4.local
                let key = SymmetricKey(bytes: SecretBytes(copying: hex(keyHex)))!
                if expectFail {
                    #expect(throws: PasetoError.self, "\(name)") {
                        try PasetoV4Local.decrypt(token, with: key, footer: footer, implicit: implicit)
                    }
                    continue
                }
                let payload = Array((test["payload"] as! String).utf8)
                let encrypted = PasetoV4Local.encrypt(payload, with: key, footer: footer, implicit: implicit,
                                                      nonce: hex(test["nonce"] as! String))
                #expect(encrypted == token, "\(name): encryption")
                #expect(try PasetoV4Local.decrypt(token, with: key, footer: footer, implicit: implicit) == payload, "\(name)")
            } else {  // v4.public
                let publicKey = IdentityPublicKey(bytes: hex(test["public-key"] as! String))!
                if expectFail {
                    #expect(throws: PasetoError.self, "\(name)") {
                        try PasetoV4Public.verify(token, with: publicKey, footer: footer, implicit: implicit)
                    }
                    continue
                }
                let pair = IdentityKeyPair(seed: SecretBytes(copying: hex(test["secret-key-seed"] as! String)))
                #expect(pair.secretKey == SecretBytes(copying: hex(test["secret-key"] as! String)), "\(name)")
                #expect(pair.publicKey == publicKey, "\(name)")
                let payload = Array((test["payload"] as! String).utf8)
                #expect(PasetoV4Public.sign(payload, with: pair, footer: footer, implicit: implicit) == token, "\(name): signing")
                #expect(try PasetoV4Public.verify(token, with: publicKey, footer: footer, implicit: implicit) == payload, "\(name)")
            }
        }
    }

    @Test func paserkPublicAndPID() throws {
        for file in ["k4.public.json", "k4.pid.json"] {
            for test in try Fixtures.officialTests(file) {
                let name = test["name"] as! String
                let key = hex(test["key"] as! String)
                guard let paserk = test["paserk"] as? String else {
                    #expect(test["expect-fail"] as? Bool == true)
                    #expect(IdentityPublicKey(bytes: key) == nil, "\(name): a key of the wrong length must not serialise")
                    continue
                }
                let publicKey = try #require(IdentityPublicKey(bytes: key), "\(name)")
                if file == "k4.public.json" {
                    #expect(publicKey.paserk == paserk, "\(name)")
                    #expect(try IdentityPublicKey(paserk: paserk) == publicKey, "\(name)")
                } else {
                    #expect(publicKey.paserkID == paserk, "\(name)")
                }
            }
        }
    }

    @Test func paserkSecretAndSID() throws {
        for file in ["k4.secret.json", "k4.sid.json"] {
            for test in try Fixtures.officialTests(file) {
                let name = test["name"] as! String
                let key = hex(test["key"] as! String)
                guard let paserk = test["paserk"] as? String else {
                    #expect(test["expect-fail"] as? Bool == true)
                    #expect(IdentityKeyPair(secretKey: SecretBytes(copying: key)) == nil, "\(name)")
                    continue
                }
                let pair = try #require(IdentityKeyPair(secretKey: SecretBytes(copying: key)), "\(name)")
                if file == "k4.secret.json" {
                    #expect(pair.paserk == paserk, "\(name)")
                    #expect(try IdentityKeyPair(paserk: paserk).secretKey == pair.secretKey, "\(name)")
                    #expect(pair.publicKey.bytes == hex(test["public-key"] as! String), "\(name)")
                } else {
                    #expect(pair.paserkSecretID == paserk, "\(name)")
                }
            }
        }
    }

    @Test func paserkLocalAndLID() throws {
        for file in ["k4.local.json", "k4.lid.json"] {
            for test in try Fixtures.officialTests(file) {
                let name = test["name"] as! String
                let key = test["key"] as? String
                let paserk = test["paserk"] as? String
                if test["expect-fail"] as! Bool {
                    if let key {
                        #expect(SymmetricKey(bytes: SecretBytes(copying: hex(key))) == nil, "\(name)")
                    }
                    if let paserk {
                        #expect(throws: PaserkError.self, "\(name)") { try SymmetricKey(paserk: paserk) }
                    }
                    continue
                }
                let symmetric = try #require(SymmetricKey(bytes: SecretBytes(copying: hex(key!))), "\(name)")
                if file == "k4.local.json" {
                    #expect(symmetric.paserk == paserk, "\(name)")
                    #expect(try SymmetricKey(paserk: paserk!) == symmetric, "\(name)")
                } else {
                    #expect(symmetric.paserkID == paserk, "\(name)")
                }
            }
        }
    }

    @Test func paserkRefusesOtherVersionsAndTypes() {
        let publicKey = IdentityKeyPair().publicKey
        #expect(throws: PaserkError.wrongType(expected: "k4.public.")) {
            try IdentityPublicKey(paserk: publicKey.paserk.replacingOccurrences(of: "k4.", with: "k3."))
        }
        #expect(throws: PaserkError.wrongType(expected: "k4.secret.")) { try IdentityKeyPair(paserk: publicKey.paserk) }
        #expect(throws: PaserkError.malformedKey) { try IdentityPublicKey(paserk: publicKey.paserk + "A") }
        #expect(throws: PaserkError.malformedKey) { try IdentityPublicKey(paserk: publicKey.paserk + "=") }
    }

    @Test func paserkRefusesSecretKeyWithForeignPublicHalf() throws {
        let a = IdentityKeyPair(), b = IdentityKeyPair()
        let mixed = a.secretKey.withUnsafeBytes { Array($0.prefix(32)) } + b.publicKey.bytes
        let text = "k4.secret." + Base64URL.encode(mixed)
        #expect(throws: PaserkError.inconsistentSecretKey) { try IdentityKeyPair(paserk: text) }
    }
}
