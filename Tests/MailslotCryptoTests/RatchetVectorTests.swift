import Foundation
import Testing
@testable import MailslotCrypto

/// `spec/vectors/sessions.json` (spec/ratchet.md §9): HKDF, the identity keys' X25519 form, a
/// version 2 bundle, X3DH, the ratchet's keys, a conversation of whole envelopes and refusals.
/// Generated here from published seeds with `MAILSLOT_WRITE_VECTORS=1`, like the other files of
/// ``SpecVectorTests``, and checked on every run: the committed file must be what comes out, and
/// every envelope must open (or fail) as it says when replayed from the file alone.
extension SpecVectorTests {
    /// The seeds of the ratchet vectors (X25519 key pairs by `crypto_box_seed_keypair`, identity
    /// key pairs by `crypto_sign_seed_keypair`).
    static let ratchetSeeds: [String: [UInt8]] = [
        "alice_identity": bytes(0xA1), "alice_mailbox": bytes(0xA2), "bob_identity": bytes(0xB0), "bob_mailbox": bytes(0xB1),
        "carol_identity": bytes(0xC0),
        "bob_signed_prekey": bytes(0xB3), "bob_one_time_prekey": bytes(0xB4),
        "alice_ephemeral": bytes(0xA4), "alice_ephemeral_2": bytes(0xA7),
        "alice_ratchet_1": bytes(0xA5), "alice_ratchet_2": bytes(0xA6), "alice_ratchet_3": bytes(0xA8), "alice_ratchet_4": bytes(0xA9),
        "bob_ratchet_1": bytes(0xB5), "bob_ratchet_2": bytes(0xB6), "bob_ratchet_3": bytes(0xB7), "case_ratchet": bytes(0xCC),
    ].merging((1...retiredKeyRounds).map { ("bob_turn_\($0)", bytes(UInt8($0))) }
              + (1..<retiredKeyRounds).map { ("alice_turn_\($0)", bytes(0x20 + UInt8($0))) }) { $1 }
    /// The DH steps of the retired-key cases: one more than the 16 retired ratchet keys a side
    /// keeps (spec/ratchet.md §4.2), so that the oldest is forgotten.
    static let retiredKeyRounds = 16
    static let signedPrekeyID: UInt32 = 1, oneTimePrekeyID: UInt32 = 42

    static func x25519(_ name: String) -> X25519KeyPair { X25519KeyPair(seed: SecretBytes(copying: ratchetSeeds[name]!)) }
    static func identity(_ name: String) -> IdentityKeyPair { IdentityKeyPair(seed: SecretBytes(copying: ratchetSeeds[name]!)) }
    static func hexString(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }
    static func secretHex(_ secret: SecretBytes) -> String { secret.withUnsafeBytes { hexString(Array($0)) } }
    static func u32(_ value: UInt32) -> [UInt8] { var out: [UInt8] = []; Envelope.appendUInt32(value, to: &out); return out }

    /// One user of the vectors: keys, the prekeys it holds and its ratchets, opening envelopes as
    /// spec/ratchet.md §5.3 and §6 say (find the ratchet by id, else accept a ratchet start
    /// naming prekeys it holds, erasing the one-time prekey with the first message stored).
    struct VectorUser {
        let uid: String
        let identity: IdentityKeyPair
        let mailbox: MailboxKeyPair
        var signedPrekeys: [UInt32: X25519KeyPair] = [:]
        var oneTimePrekeys: [UInt32: X25519KeyPair] = [:]
        var ratchets: [[UInt8]: Ratchet] = [:]

        mutating func open(_ envelope: [UInt8], id: String, as recipient: String? = nil, ownIdentity: IdentityPublicKey? = nil,
                           now: Int64, newRatchetKey: () -> X25519KeyPair) throws(EnvelopeError) -> OpenedEnvelope {
            guard case .version2(let sealed) = try Envelope.unseal(envelope, id: id, recipient: recipient ?? uid, keys: mailbox) else {
                throw .unsupportedVersion(1)
            }
            var usedOneTimePrekey: UInt32?
            let ratchet: Ratchet
            if let known = ratchets[sealed.ratchetID] {
                ratchet = known
            } else {
                guard let start = sealed.start else { throw .noRatchet }
                guard let signed = signedPrekeys[start.signedPrekeyID] else { throw .unknownPrekey }
                var oneTime: X25519KeyPair?
                if let oneTimeID = start.oneTimePrekeyID {
                    guard let pair = oneTimePrekeys[oneTimeID] else { throw .unknownPrekey }
                    oneTime = pair
                    usedOneTimePrekey = oneTimeID
                }
                ratchet = try Ratchet.accept(sealed, identity: identity, signedPrekey: signed, oneTimePrekey: oneTime)
            }
            let (opened, next) = try sealed.open(with: ratchet, identity: ownIdentity ?? identity.publicKey, now: now,
                                                 newRatchetKey: newRatchetKey)
            ratchets[next.id] = next
            if let usedOneTimePrekey { oneTimePrekeys[usedOneTimePrekey] = nil }
            return opened
        }
    }

    static func vectorUsers() -> (alice: VectorUser, bob: VectorUser) {
        let alice = VectorUser(uid: "alice", identity: identity("alice_identity"), mailbox: x25519("alice_mailbox"))
        var bob = VectorUser(uid: "bob", identity: identity("bob_identity"), mailbox: x25519("bob_mailbox"))
        bob.signedPrekeys[signedPrekeyID] = x25519("bob_signed_prekey")
        bob.oneTimePrekeys[oneTimePrekeyID] = x25519("bob_one_time_prekey")
        return (alice, bob)
    }

    static func textBody(_ text: String, from sender: String) -> [UInt8] {
        Array(#"{"payload":{"text":"\#(text)"},"sender":{"id":"\#(sender)"},"timestamp":1800000000000,"type":"text"}"#.utf8)
    }

    static func vectorMessageID(_ name: String) -> String { "01KF" + String(repeating: "0", count: 22 - name.utf8.count) + name }

    // MARK: Generation

    // The parts below compute every value from the primitives, as a third party would, and
    // require the reference's own functions and state to agree.

    static func hkdfCases() -> [[String: Any]] {
        let rfc: [(String, [UInt8], [UInt8], [UInt8], Int)] = [
            ("RFC 5869 A.1", Array(0x00...0x0c), [UInt8](repeating: 0x0b, count: 22), Array(0xf0...0xf9), 42),
            ("RFC 5869 A.2", Array(0x60...0xaf), Array(0x00...0x4f), Array(0xb0...0xff), 82),
            ("RFC 5869 A.3 (no salt, no info)", [], [UInt8](repeating: 0x0b, count: 22), [], 42),
        ]
        return rfc.map { name, salt, ikm, info, length in
            ["name": name, "salt_hex": hexString(salt), "ikm_hex": hexString(ikm), "info_hex": hexString(info), "length": length,
             "okm_hex": hexString(hkdfSHA256(salt: salt, inputKeyMaterial: ikm, info: info, length: length))]
        }
    }

    static func identityCases() -> [[String: Any]] {
        ["alice", "bob", "carol"].map { name in
            let pair = identity("\(name)_identity"), agreement = pair.agreementKeyPair
            precondition(agreement.publicKey == pair.publicKey.agreementKey, "the two conversions agree")
            return ["name": name, "seed": "\(name)_identity", "identity_key": Base64URL.encode(pair.publicKey.bytes),
                    "x25519_secret_key": secretBase64(agreement.secretKey), "x25519_public_key": Base64URL.encode(agreement.publicKey.bytes)]
        }
    }

    static func prekeyCases() -> [String: Any] {
        func entry(_ seed: String, id: UInt32?) -> [String: Any] {
            let pair = x25519(seed)
            var out: [String: Any] = ["seed": seed, "secret_key": secretBase64(pair.secretKey), "public_key": Base64URL.encode(pair.publicKey.bytes)]
            if let id { out["id"] = Int(id) }
            return out
        }
        return ["bob_signed_prekey": entry("bob_signed_prekey", id: signedPrekeyID),
                "bob_one_time_prekey": entry("bob_one_time_prekey", id: oneTimePrekeyID),
                "bob_mailbox": entry("bob_mailbox", id: nil), "alice_mailbox": entry("alice_mailbox", id: nil)]
    }

    /// Bob's version 2 bundle, its signed bytes, and the cases around it (spec/ratchet.md §2).
    static func ratchetBundle() throws -> (bundle: [String: Any], cases: [[String: Any]]) {
        let bob = identity("bob_identity"), mailbox = x25519("bob_mailbox").publicKey, prekey = x25519("bob_signed_prekey").publicKey
        let created = Timestamp.format(now)
        let good = KeyBundle(uid: "bob", identity: bob, mailboxKey: mailbox, signedPrekey: PublishedPrekey(id: signedPrekeyID, key: prekey),
                             createdAt: Date(timeIntervalSince1970: Double(now)))
        func signedBytes(id: [UInt8], key: [UInt8], label: [UInt8] = KeyBundle.labelV2) -> [UInt8] {
            preAuthenticationEncoding([label, Array("bob".utf8), bob.publicKey.bytes, mailbox.bytes, Array(created.utf8), id, key])
        }
        let signed = signedBytes(id: u32(signedPrekeyID), key: prekey.bytes)
        #expect(bob.publicKey.verify(signature: good.signature, of: signed), "the bundle signs the PAE of spec/ratchet.md §2")
        /// A bundle written by hand: `id` as a JSON number text, signed over `signedID` and `key`.
        func json(version: Int = 2, id: String? = String(signedPrekeyID), key: [UInt8]? = prekey.bytes, signedID: [UInt8] = u32(signedPrekeyID),
                  signature: [UInt8]? = nil, label: [UInt8] = KeyBundle.labelV2) -> String {
            let sig = signature ?? bob.sign(label == KeyBundle.label
                ? preAuthenticationEncoding([label, Array("bob".utf8), bob.publicKey.bytes, mailbox.bytes, Array(created.utf8)])
                : signedBytes(id: signedID, key: key ?? prekey.bytes, label: label))
            var members = [#""created_at":"\#(created)""#, #""identity_key":"\#(Base64URL.encode(bob.publicKey.bytes))""#,
                           #""mailbox_key":"\#(Base64URL.encode(mailbox.bytes))""#, #""signature":"\#(Base64URL.encode(sig))""#]
            if let key { members.append(#""signed_prekey":"\#(Base64URL.encode(key))""#) }
            if let id { members.append(#""signed_prekey_id":\#(id)"#) }
            members += [#""uid":"bob""#, #""version":\#(version)"#]
            return "{" + members.joined(separator: ",") + "}"
        }
        let text = String(decoding: good.encoded(), as: UTF8.self)
        precondition(json() == text, "the hand-written bundle is the reference's")
        let zero = [UInt8](repeating: 0, count: 32)
        let other = x25519("bob_one_time_prekey").publicKey.bytes
        func vector(_ name: String, _ bundle: String, _ expect: String) -> [String: Any] {
            ["name": name, "bundle": bundle, "expected_uid": "bob", "expect": expect]
        }
        let cases = [
            vector("valid, version 2", text, "ok"),
            vector("signed prekey swapped", json(signature: good.signature).replacingOccurrences(of: Base64URL.encode(prekey.bytes), with: Base64URL.encode(other)),
                   "bundle_bad_signature"),
            vector("signed prekey id changed", json(id: "2", signature: good.signature), "bundle_bad_signature"),
            vector("signed with the version 1 label", json(label: KeyBundle.label), "bundle_bad_signature"),
            vector("version 1 with a signed prekey", json(version: 1), "bundle_malformed"),
            vector("version 2 without a signed prekey", json(id: nil, key: nil, label: KeyBundle.label), "bundle_malformed"),
            vector("signed_prekey_id without signed_prekey", json(key: nil, signature: good.signature), "bundle_malformed"),
            vector("signed_prekey without signed_prekey_id", json(id: nil, signature: good.signature), "bundle_malformed"),
            vector("signed prekey id 0, signed", json(id: "0", signedID: u32(0)), "bundle_malformed"),
            vector("signed prekey id 2^32", json(id: "4294967296", signature: good.signature), "bundle_malformed"),
            vector("signed prekey id 2^32 - 1, signed", json(id: "4294967295", signedID: u32(.max)), "ok"),
            vector("signed prekey id -1", json(id: "-1", signature: good.signature), "bundle_malformed"),
            vector("signed prekey zero (low order), signed", json(key: zero), "bundle_malformed"),
            vector("signed prekey of order 8, signed", json(key: hex("e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800")),
                   "bundle_malformed"),
            vector("signed prekey of 31 bytes", json(key: Array(prekey.bytes.prefix(31)), signature: good.signature), "bundle_malformed"),
        ]
        let bundle: [String: Any] = ["json": text, "signed_hex": hexString(signed), "key_id": good.keyID,
                                     "key_id_version_1": KeyBundle(uid: "bob", identity: bob, mailboxKey: mailbox).keyID]
        return (bundle, cases)
    }

    /// X3DH of alice with bob's prekeys, with and without the one-time prekey (spec/ratchet.md §3).
    static func x3dhCase(name: String, ephemeral ephemeralSeed: String, ratchet ratchetSeed: String, oneTime: Bool) throws -> [String: Any] {
        let alice = identity("alice_identity"), bob = identity("bob_identity")
        let ephemeral = x25519(ephemeralSeed), signed = x25519("bob_signed_prekey"), opk = x25519("bob_one_time_prekey")
        let bobX = try #require(bob.publicKey.agreementKey)
        let outputs = try [alice.agreementKeyPair.agree(with: signed.publicKey), ephemeral.agree(with: bobX), ephemeral.agree(with: signed.publicKey)]
            .map { try #require($0) } + (oneTime ? [try #require(ephemeral.agree(with: opk.publicKey))] : [])
        // The responder computes each output from its side.
        let responder = try [signed.agree(with: try #require(alice.publicKey.agreementKey)), bob.agreementKeyPair.agree(with: ephemeral.publicKey),
                             signed.agree(with: ephemeral.publicKey)].map { try #require($0) }
            + (oneTime ? [try #require(opk.agree(with: ephemeral.publicKey))] : [])
        #expect(outputs == responder, "\(name): both sides' DH outputs")
        let ikm = [UInt8](repeating: 0xFF, count: 32) + outputs.joined()
        let secret = hkdfSHA256(salt: [UInt8](repeating: 0, count: 32), inputKeyMaterial: ikm, info: Array("mailslot-x3dh-v2".utf8), length: 32)
        let reference = try X3DH.initiatorSecret(identity: alice, ephemeral: ephemeral, peerIdentity: bob.publicKey, signedPrekey: signed.publicKey,
                                                 oneTimePrekey: oneTime ? opk.publicKey : nil)
        #expect(secretHex(reference) == hexString(secret), "\(name): X3DH.initiatorSecret")
        let responderSecret = try X3DH.responderSecret(identity: bob, signedPrekey: signed, oneTimePrekey: oneTime ? opk : nil,
                                                       peerIdentity: alice.publicKey, ephemeral: ephemeral.publicKey)
        #expect(secretHex(responderSecret) == hexString(secret), "\(name): X3DH.responderSecret")
        let idInput = preAuthenticationEncoding([Array("mailslot-session-id-v2".utf8), alice.publicKey.bytes, bob.publicKey.bytes, ephemeral.publicKey.bytes])
        let ratchetID = blake2b(idInput, length: 16)
        #expect(ratchetID == Ratchet.id(initiator: alice.publicKey, responder: bob.publicKey, ephemeral: ephemeral.publicKey))
        var out: [String: Any] = [
            "name": name, "session": String(name.prefix(2)), "initiator": "alice", "responder": "bob", "ephemeral_seed": ephemeralSeed, "ratchet_seed": ratchetSeed,
            "ephemeral_public_key": Base64URL.encode(ephemeral.publicKey.bytes), "signed_prekey_id": Int(signedPrekeyID),
            "dh1_hex": hexString(outputs[0]), "dh2_hex": hexString(outputs[1]), "dh3_hex": hexString(outputs[2]),
            "ikm_hex": hexString(ikm), "sk_hex": hexString(secret), "session_id_input_hex": hexString(idInput),
            "session_id_hex": hexString(ratchetID),
        ]
        if oneTime {
            out["one_time_prekey_id"] = Int(oneTimePrekeyID)
            out["dh4_hex"] = hexString(outputs[3])
        }
        return out
    }

    /// One root step, KDF_RK(rk, DH(own, peer)), recomputed.
    static func rootStep(_ root: [UInt8], _ own: X25519KeyPair, _ peer: X25519PublicKey) throws -> (dh: [UInt8], root: [UInt8], chain: [UInt8]) {
        let dh = try #require(own.agree(with: peer))
        let out = hkdfSHA256(salt: root, inputKeyMaterial: dh, info: Array("mailslot-ratchet-root-v2".utf8), length: 64)
        return (dh, Array(out[0..<32]), Array(out[32..<64]))
    }

    /// KDF_CK and the message key's expansion, recomputed from a chain key.
    static func messageKeys(_ chain: [UInt8]) -> [String: Any] {
        let messageKey = hmacSHA256(key: chain, [0x01]), next = hmacSHA256(key: chain, [0x02])
        let expanded = hkdfSHA256(salt: [], inputKeyMaterial: messageKey, info: Array("mailslot-message-key-v2".utf8), length: 56)
        return ["chain_key_hex": hexString(chain), "message_key_hex": hexString(messageKey), "next_chain_key_hex": hexString(next),
                "aead_key_hex": hexString(Array(expanded[0..<32])), "nonce_hex": hexString(Array(expanded[32..<56]))]
    }

    /// The conversation, the ratchet's keys along it, and the cases opened against its states.
    static func ratchetConversation() throws -> (ratchet: [String: Any], conversation: [[String: Any]], cases: [[String: Any]]) {
        var (alice, bob) = vectorUsers()
        let bobKeys = identity("bob_identity"), carol = identity("carol_identity")
        var events: [[String: Any]] = []
        var sealed: [String: (id: String, envelope: [UInt8], body: [UInt8], to: String)] = [:]
        var bobStates: [VectorUser] = [bob]  // Bob after each event: index = event number
        var aliceStates: [VectorUser] = [alice]  // and Alice, for the cases she opens
        var ratchetIDs: [String: [UInt8]] = [:]
        var ratchetVector: [String: Any] = [:]

        func begin(_ label: String, ephemeral: String, ratchetSeed: String, oneTime: Bool) throws {
            let ratchet = try Ratchet.initiate(identity: alice.identity, peerIdentity: bobKeys.publicKey,
                                               signedPrekey: PublishedPrekey(id: signedPrekeyID, key: x25519("bob_signed_prekey").publicKey),
                                               oneTimePrekey: oneTime ? PublishedPrekey(id: oneTimePrekeyID, key: x25519("bob_one_time_prekey").publicKey) : nil,
                                               ephemeral: x25519(ephemeral), ratchetKey: x25519(ratchetSeed))
            alice.ratchets[ratchet.id] = ratchet
            ratchetIDs[label] = ratchet.id
        }
        func seal(_ name: String, from sender: String, in label: String, text: String) throws {
            let id = vectorMessageID(name), body = textBody(text, from: sender), seed = ephemeralSeed(name)
            let (user, peer) = sender == "alice" ? (alice, bob) : (bob, alice)
            var ratchet = try #require(user.ratchets[ratchetIDs[label]!])
            let before = ratchet, header = ratchet.state  // the header is the state's before sealing
            let envelope = try Envelope.seal(body: body, id: id, from: sender, identity: user.identity, to: peer.uid,
                                             mailboxKey: peer.mailbox.publicKey, ratchet: &ratchet,
                                             outerSeal: { peer.mailbox.publicKey.seal($0, ephemeralSeed: seed) })
            if sender == "alice" { alice.ratchets[ratchet.id] = ratchet } else { bob.ratchets[ratchet.id] = ratchet }
            sealed[name] = (id, envelope, body, peer.uid)
            events.append(["event": "seal", "message": name, "from": sender, "to": peer.uid, "session": label, "id": id,
                           "body": String(decoding: body, as: UTF8.self), "envelope": Base64URL.encode(envelope),
                           "ephemeral_seed": Base64URL.encode(seed),
                           "start": before.start != nil,
                           "ratchet_key": Base64URL.encode(header.ownRatchet.publicKey.bytes),
                           "previous_chain_length": Int(header.previousSent), "message_number": Int(header.sent)])
            bobStates.append(bob)
            aliceStates.append(alice)
        }
        func open(_ name: String, by opener: String, turning seed: String? = nil) throws {
            let message = try #require(sealed[name])
            var turned = false
            let newKey = { () -> X25519KeyPair in
                turned = true
                return x25519(seed ?? "case_ratchet")
            }
            let opened = opener == "bob"
                ? try bob.open(message.envelope, id: message.id, now: now, newRatchetKey: newKey)
                : try alice.open(message.envelope, id: message.id, now: now, newRatchetKey: newKey)
            #expect(opened.body == message.body, "\(name) opens")
            #expect(turned == (seed != nil), "\(name): the ratchet turns exactly when the vector says")
            var event: [String: Any] = ["event": "open", "message": name, "by": opener]
            if let seed { event["new_ratchet_seed"] = seed }
            events.append(event)
            bobStates.append(bob)
            aliceStates.append(alice)
        }
        func state(_ ratchet: Ratchet) -> [String: Any] {
            var out: [String: Any] = ["root_key_hex": secretHex(ratchet.state.rootKey),
                                      "own_ratchet_key": Base64URL.encode(ratchet.state.ownRatchet.publicKey.bytes)]
            if let chain = ratchet.state.sendingChain { out["sending_chain_key_hex"] = secretHex(chain) }
            if let chain = ratchet.state.receivingChain { out["receiving_chain_key_hex"] = secretHex(chain) }
            return out
        }

        // Alice's initial state, recomputed: one root step against Bob's signed prekey.
        try begin("S1", ephemeral: "alice_ephemeral", ratchetSeed: "alice_ratchet_1", oneTime: true)
        let s1 = ratchetIDs["S1"]!
        let sk = try X3DH.initiatorSecret(identity: alice.identity, ephemeral: x25519("alice_ephemeral"), peerIdentity: bobKeys.publicKey,
                                          signedPrekey: x25519("bob_signed_prekey").publicKey, oneTimePrekey: x25519("bob_one_time_prekey").publicKey)
        let skBytes = sk.withUnsafeBytes { Array($0) }
        let aliceInit = try rootStep(skBytes, x25519("alice_ratchet_1"), x25519("bob_signed_prekey").publicKey)
        #expect(state(alice.ratchets[s1]!)["root_key_hex"] as? String == hexString(aliceInit.root))
        #expect(state(alice.ratchets[s1]!)["sending_chain_key_hex"] as? String == hexString(aliceInit.chain))
        ratchetVector["alice_initial"] = ["dh_hex": hexString(aliceInit.dh), "root_key_hex": hexString(aliceInit.root),
                                    "sending_chain_key_hex": hexString(aliceInit.chain), "first_message": messageKeys(aliceInit.chain)]

        try seal("A1", from: "alice", in: "S1", text: "hello bob")
        try seal("A2", from: "alice", in: "S1", text: "second, delivered late")
        try seal("A3", from: "alice", in: "S1", text: "third")
        try seal("A4", from: "alice", in: "S1", text: "fourth, delivered after the next chain's first")
        let afterA4Sealed = alice  // for the case of the 2000 skipped keys below
        try open("A1", by: "bob", turning: "bob_ratchet_1")
        // Bob's ratchet step on A1, recomputed: receiving chain with his signed prekey, then a new key.
        let bobReceive = try rootStep(skBytes, x25519("bob_signed_prekey"), x25519("alice_ratchet_1").publicKey)
        let bobSend = try rootStep(bobReceive.root, x25519("bob_ratchet_1"), x25519("alice_ratchet_1").publicKey)
        #expect(bobReceive.chain == aliceInit.chain && bobReceive.root == aliceInit.root, "both sides' first chain")
        try open("A3", by: "bob")
        #expect(state(bob.ratchets[s1]!)["root_key_hex"] as? String == hexString(bobSend.root))
        #expect(state(bob.ratchets[s1]!)["sending_chain_key_hex"] as? String == hexString(bobSend.chain))
        #expect(bob.ratchets[s1]!.state.skipped.count == 1, "A2's key is kept")
        ratchetVector["bob_step"] = ["receiving_dh_hex": hexString(bobReceive.dh), "receiving_root_key_hex": hexString(bobReceive.root),
                               "receiving_chain_key_hex": hexString(bobReceive.chain), "new_ratchet_seed": "bob_ratchet_1",
                               "sending_dh_hex": hexString(bobSend.dh), "root_key_hex": hexString(bobSend.root),
                               "sending_chain_key_hex": hexString(bobSend.chain), "first_message": messageKeys(bobSend.chain)]
        try seal("B1", from: "bob", in: "S1", text: "hi alice")
        try open("B1", by: "alice", turning: "alice_ratchet_2")
        let aliceReceive = try rootStep(aliceInit.root, x25519("alice_ratchet_1"), x25519("bob_ratchet_1").publicKey)
        #expect(aliceReceive.root == bobSend.root && aliceReceive.chain == bobSend.chain, "alice's receiving chain is bob's sending chain")
        let aliceSend = try rootStep(aliceReceive.root, x25519("alice_ratchet_2"), x25519("bob_ratchet_1").publicKey)
        #expect(state(alice.ratchets[s1]!)["root_key_hex"] as? String == hexString(aliceSend.root))
        #expect(state(alice.ratchets[s1]!)["sending_chain_key_hex"] as? String == hexString(aliceSend.chain))
        #expect(alice.ratchets[s1]!.start == nil, "the answer ends the ratchet start")
        ratchetVector["alice_step"] = ["receiving_dh_hex": hexString(aliceReceive.dh), "receiving_root_key_hex": hexString(aliceReceive.root),
                                 "receiving_chain_key_hex": hexString(aliceReceive.chain), "new_ratchet_seed": "alice_ratchet_2",
                                 "sending_dh_hex": hexString(aliceSend.dh), "root_key_hex": hexString(aliceSend.root),
                                 "sending_chain_key_hex": hexString(aliceSend.chain), "first_message": messageKeys(aliceSend.chain)]
        try seal("A5", from: "alice", in: "S1", text: "after my step")
        let afterA5Sealed = alice  // for the crafted cases below: alice's state then
        try open("A5", by: "bob", turning: "bob_ratchet_2")  // keeps A4's key: skipping to its previous chain length, 4
        #expect(bob.ratchets[s1]!.state.skipped.count == 2, "A2's and A4's keys are kept")
        try open("A2", by: "bob")
        try open("A4", by: "bob")
        #expect(bob.ratchets[s1]!.state.skipped.isEmpty)
        try seal("B2", from: "bob", in: "S1", text: "and mine")
        try open("B2", by: "alice", turning: "alice_ratchet_3")
        try begin("S2", ephemeral: "alice_ephemeral_2", ratchetSeed: "alice_ratchet_4", oneTime: false)
        try seal("F1", from: "alice", in: "S2", text: "no one-time prekey left")
        try open("F1", by: "bob", turning: "bob_ratchet_3")
        for (index, _) in events.enumerated() { events[index]["step"] = index + 1 }

        // Cases opened by Bob in the state after event `after_step` (0: before the first).
        var cases: [[String: Any]] = []
        let step = { (message: String, event: String) -> Int in
            events.firstIndex { $0["message"] as? String == message && $0["event"] as? String == event }! + 1
        }
        /// The record of `message` as Bob's mailbox key opens it.
        func record(_ message: String) throws -> [UInt8] {
            let padded = try #require(bob.mailbox.open(sealed: sealed[message]!.envelope))
            return Array(padded[..<(try #require(padded.lastIndex(of: 0x80)))])
        }
        func add(_ name: String, after: Int, envelope: [UInt8], id: String, expect: String, recipient: String = "bob",
                 now caseNow: Int64 = now, ownIdentity: IdentityKeyPair? = nil, body: [UInt8]? = nil,
                 prior: [(id: String, envelope: [UInt8])] = [], priorSeeds: [String] = [], opener: String = "bob") {
            var user = opener == "alice" ? aliceStates[after] : bobStates[after]
            var outcome = "ok", openedBody: [UInt8] = []
            do {
                for (index, earlier) in prior.enumerated() {
                    let seed = index < priorSeeds.count ? priorSeeds[index] : "case_ratchet"
                    _ = try user.open(earlier.envelope, id: earlier.id, now: caseNow, newRatchetKey: { x25519(seed) })
                }
                openedBody = try user.open(envelope, id: id, as: recipient, ownIdentity: ownIdentity?.publicKey, now: caseNow,
                                           newRatchetKey: { x25519("case_ratchet") }).body
            } catch {
                outcome = error.code
            }
            #expect(outcome == expect, "\(name)")
            if let body { #expect(openedBody == body, "\(name)") }
            var out: [String: Any] = ["name": name, "after_step": after, "id": id, "recipient": recipient,
                                      "envelope": Base64URL.encode(envelope), "now": Int(caseNow), "expect": expect]
            if let ownIdentity { out["opener_identity"] = Base64URL.encode(ownIdentity.publicKey.bytes) }
            if let body { out["body"] = String(decoding: body, as: UTF8.self) }
            if !prior.isEmpty {
                out["prior"] = prior.enumerated().map { index, earlier in
                    var entry = ["id": earlier.id, "envelope": Base64URL.encode(earlier.envelope)]
                    if index < priorSeeds.count { entry["new_ratchet_seed"] = priorSeeds[index] }
                    return entry
                }
            }
            if opener != "bob" { out["opener"] = opener }
            cases.append(out)
        }
        func resealed(_ name: String, _ message: String, _ change: (inout [UInt8]) -> Void) throws -> [UInt8] {
            var bytes = try record(message)
            change(&bytes)
            return bob.mailbox.publicKey.seal(try Envelope.pad(bytes), ephemeralSeed: ephemeralSeed(name))
        }
        /// The offset of a field in a record from alice to bob (a = 5, b = 3, c = 26).
        let ratchetIDAt = 36 + 5 + 3 + 26, kindAt = ratchetIDAt + 16
        func message(_ name: String) -> (id: String, envelope: [UInt8]) { (sealed[name]!.id, sealed[name]!.envelope) }

        // Refusals of the ratchet layer.
        add("A1 replayed after it opened", after: step("A1", "open"), envelope: message("A1").envelope, id: message("A1").id, expect: "envelope_stale_message")
        add("A3 replayed after the ratchet turned", after: step("A5", "open"), envelope: message("A3").envelope, id: message("A3").id,
            expect: "envelope_stale_message")
        add("A5 to a recipient without the session", after: 0, envelope: message("A5").envelope, id: message("A5").id, expect: "envelope_no_session")
        add("A2 at 31 days, its skipped key kept", after: step("A3", "open"), envelope: message("A2").envelope, id: message("A2").id,
            expect: "ok", now: now + 31 * 86_400, body: sealed["A2"]!.body)
        add("A2 at 31 days and a second, its skipped key erased", after: step("A3", "open"), envelope: message("A2").envelope, id: message("A2").id,
            expect: "envelope_stale_message", now: now + 31 * 86_400 + 1)
        add("A5 with its last byte altered", after: step("B1", "seal"),
            envelope: try resealed("A5 with its last byte altered", "A5") { $0[$0.count - 1] ^= 0x01 }, id: message("A5").id,
            expect: "envelope_session_mismatch")
        add("A5 with its message number altered", after: step("B1", "seal"),
            envelope: try resealed("A5 with its message number altered", "A5") { $0[kindAt + 1 + 32 + 4 + 3] ^= 0x01 }, id: message("A5").id,
            expect: "envelope_session_mismatch")
        add("A5 naming carol's identity key as sender", after: step("B1", "seal"),
            envelope: try resealed("A5 naming carol's identity key as sender", "A5") { $0.replaceSubrange(7..<39, with: carol.publicKey.bytes) },
            id: message("A5").id, expect: "envelope_session_mismatch")
        add("A5 opened with carol's identity key as the recipient's", after: step("B1", "seal"), envelope: message("A5").envelope,
            id: message("A5").id, expect: "envelope_session_mismatch", ownIdentity: carol)
        add("A5 opened as another recipient", after: step("B1", "seal"), envelope: message("A5").envelope, id: message("A5").id,
            expect: "envelope_wrong_recipient", recipient: "bobby")
        add("A5 opened under another message id", after: step("B1", "seal"), envelope: message("A5").envelope, id: vectorMessageID("X9"),
            expect: "envelope_wrong_message_id")
        add("A5 with message kind 2", after: step("B1", "seal"),
            envelope: try resealed("A5 with message kind 2", "A5") { $0[kindAt] = 2 }, id: message("A5").id, expect: "envelope_malformed_record")
        add("A5 with a byte after the ciphertext", after: step("B1", "seal"),
            envelope: try resealed("A5 with a byte after the ciphertext", "A5") { $0.append(0) }, id: message("A5").id, expect: "envelope_malformed_record")
        add("A5 with a ciphertext of 15 bytes", after: step("B1", "seal"),
            envelope: try resealed("A5 with a ciphertext of 15 bytes", "A5") { record in
                let lengthAt = kindAt + 1 + 32 + 8
                record = Array(record[..<lengthAt]) + u32(15) + Array(record[(lengthAt + 4)..<(lengthAt + 4 + 15)])
            }, id: message("A5").id, expect: "envelope_malformed_record")
        add("A5 with record version 3", after: step("B1", "seal"),
            envelope: try resealed("A5 with record version 3", "A5") { $0[0] = 3 }, id: message("A5").id, expect: "envelope_unsupported_version")
        // Ratchet starts.
        add("A1 naming signed prekey 0", after: 0,
            envelope: try resealed("A1 naming signed prekey 0", "A1") { $0.replaceSubrange((kindAt + 33)..<(kindAt + 37), with: u32(0)) },
            id: message("A1").id, expect: "envelope_malformed_record")
        add("A1 naming signed prekey 2, which bob does not hold", after: 0,
            envelope: try resealed("A1 naming signed prekey 2, which bob does not hold", "A1") { $0.replaceSubrange((kindAt + 33)..<(kindAt + 37), with: u32(2)) },
            id: message("A1").id, expect: "envelope_unknown_prekey")
        add("A1 naming one-time prekey 43, which bob does not hold", after: 0,
            envelope: try resealed("A1 naming one-time prekey 43, which bob does not hold", "A1") { $0.replaceSubrange((kindAt + 37)..<(kindAt + 41), with: u32(43)) },
            id: message("A1").id, expect: "envelope_unknown_prekey")
        add("A1 naming no one-time prekey", after: 0,
            envelope: try resealed("A1 naming no one-time prekey", "A1") { $0.replaceSubrange((kindAt + 37)..<(kindAt + 41), with: u32(0)) },
            id: message("A1").id, expect: "envelope_session_mismatch")
        add("A1 with another session id", after: 0,
            envelope: try resealed("A1 with another session id", "A1") { $0[ratchetIDAt] ^= 0x01 }, id: message("A1").id,
            expect: "envelope_malformed_record")
        add("A1 with its ephemeral key altered", after: 0,
            envelope: try resealed("A1 with its ephemeral key altered", "A1") { $0[kindAt + 1] ^= 0x01 }, id: message("A1").id,
            expect: "envelope_malformed_record")
        // The ephemeral key zero (low order), with the ratchet id it gives: DH2 is all zeros.
        let zeroID = Ratchet.id(initiator: alice.identity.publicKey, responder: bobKeys.publicKey,
                                ephemeral: X25519PublicKey(bytes: [UInt8](repeating: 0, count: 32))!)
        add("A1 with the ephemeral key zero and its session id", after: 0,
            envelope: try resealed("A1 with the ephemeral key zero and its session id", "A1") {
                $0.replaceSubrange(ratchetIDAt..<(ratchetIDAt + 16), with: zeroID)
                $0.replaceSubrange((kindAt + 1)..<(kindAt + 33), with: [UInt8](repeating: 0, count: 32))
            }, id: message("A1").id, expect: "envelope_session_mismatch")
        // Skipping: Bob has received A5 (N = 0) of alice's second chain; N = 1001 skips 1000 keys, N = 1002 one more.
        var farRatchet = try #require(afterA5Sealed.ratchets[s1])
        for _ in 0..<1000 {  // sealed and never delivered; only the chain moves
            _ = try Envelope.seal(body: textBody("lost", from: "alice"), id: vectorMessageID("L"), from: "alice", identity: alice.identity, to: "bob",
                                  mailboxKey: bob.mailbox.publicKey, ratchet: &farRatchet, outerSeal: { _ in [] })
        }
        for (number, expect) in [(1000, "ok"), (1001, "envelope_too_many_skipped")] {
            let name = "A message of A5's chain skipping \(number) keys"
            let id = vectorMessageID("N\(number)"), body = textBody("far", from: "alice")
            let envelope = try Envelope.seal(body: body, id: id, from: "alice", identity: alice.identity, to: "bob", mailboxKey: bob.mailbox.publicKey,
                                             ratchet: &farRatchet, outerSeal: { bob.mailbox.publicKey.seal($0, ephemeralSeed: ephemeralSeed(name)) })
            add(name, after: step("A5", "open"), envelope: envelope, id: id, expect: expect, body: expect == "ok" ? body : nil)
        }
        // At most 2000 skipped keys: after A3, Bob holds A2's; two messages of A1's chain skipping
        // 1000 each make it 2001, and A2's, the oldest, goes.
        var longRatchet = try #require(afterA4Sealed.ratchets[s1])
        var longPrior: [(id: String, envelope: [UInt8])] = []
        for (lost, number) in [(999, 1003), (1000, 2004)] {
            for _ in 0..<lost {
                _ = try Envelope.seal(body: textBody("lost", from: "alice"), id: vectorMessageID("L"), from: "alice", identity: alice.identity,
                                      to: "bob", mailboxKey: bob.mailbox.publicKey, ratchet: &longRatchet, outerSeal: { _ in [] })
            }
            let name = "A1's chain, message \(number)", id = vectorMessageID("P\(number)")
            longPrior.append((id, try Envelope.seal(body: textBody("far", from: "alice"), id: id, from: "alice", identity: alice.identity, to: "bob",
                                                    mailboxKey: bob.mailbox.publicKey, ratchet: &longRatchet,
                                                    outerSeal: { bob.mailbox.publicKey.seal($0, ephemeralSeed: ephemeralSeed(name)) })))
        }
        add("A2 after 2001 keys were skipped (the oldest dropped)", after: step("A3", "open"), envelope: message("A2").envelope, id: message("A2").id,
            expect: "envelope_stale_message", prior: longPrior)
        add("A2 after 1001 keys were skipped", after: step("A3", "open"), envelope: message("A2").envelope, id: message("A2").id,
            expect: "ok", body: sealed["A2"]!.body, prior: Array(longPrior.prefix(1)))
        // Bodies: decrypted, then refused (the state is kept only with a valid body).
        for (name, body, expect) in [("A body that is not JSON", Array("hello".utf8), "envelope_invalid_body"),
                                     ("A body whose sender is carol", textBody("it is carol", from: "carol"), "envelope_sender_mismatch")] {
            var copy = try #require(afterA5Sealed.ratchets[s1])
            let id = vectorMessageID(name == "A body that is not JSON" ? "B9" : "C9")
            let envelope = try Envelope.seal(body: body, id: id, from: "alice", identity: alice.identity, to: "bob", mailboxKey: bob.mailbox.publicKey,
                                             ratchet: &copy, outerSeal: { bob.mailbox.publicKey.seal($0, ephemeralSeed: ephemeralSeed(name)) })
            add(name, after: step("B1", "seal"), envelope: envelope, id: id, expect: expect)
        }
        // A ratchet started with carol's identity key in place of bob's, sent to bob: the ratchet id
        // names another responder.
        var misdirected = try Ratchet.initiate(identity: alice.identity, peerIdentity: carol.publicKey,
                                               signedPrekey: PublishedPrekey(id: signedPrekeyID, key: x25519("bob_signed_prekey").publicKey),
                                               oneTimePrekey: PublishedPrekey(id: oneTimePrekeyID, key: x25519("bob_one_time_prekey").publicKey),
                                               ephemeral: x25519("alice_ephemeral"), ratchetKey: x25519("alice_ratchet_1"))
        let misdirectedName = "A session start for carol's identity key sent to bob"
        add(misdirectedName, after: 0,
            envelope: try Envelope.seal(body: textBody("hello bob", from: "alice"), id: vectorMessageID("M1"), from: "alice", identity: alice.identity,
                                        to: "bob", mailboxKey: bob.mailbox.publicKey, ratchet: &misdirected,
                                        outerSeal: { bob.mailbox.publicKey.seal($0, ephemeralSeed: ephemeralSeed(misdirectedName)) }),
            id: vectorMessageID("M1"), expect: "envelope_malformed_record")

        // Checks 17 and 18 in their order: a start naming a prekey bob does not hold under a
        // ratchet id that is not the start's is refused for the prekey.
        add("A1 with another session id, naming signed prekey 2 (check 17 before 18)", after: 0,
            envelope: try resealed("A1 with another session id, naming signed prekey 2 (check 17 before 18)", "A1") {
                $0[ratchetIDAt] ^= 0x01
                $0.replaceSubrange((kindAt + 33)..<(kindAt + 37), with: u32(2))
            }, id: message("A1").id, expect: "envelope_unknown_prekey")
        add("A1 with another session id, naming one-time prekey 43 (check 17 before 18)", after: 0,
            envelope: try resealed("A1 with another session id, naming one-time prekey 43 (check 17 before 18)", "A1") {
                $0[ratchetIDAt] ^= 0x01
                $0.replaceSubrange((kindAt + 37)..<(kindAt + 41), with: u32(43))
            }, id: message("A1").id, expect: "envelope_unknown_prekey")

        // §4.4 step 4: message number 2^32 − 1 is refused, after the retired keys (step 3.1).
        let numberAt = kindAt + 1 + 32 + 4, startNumberAt = kindAt + 1 + 40 + 32 + 4
        add("A5 with message number 2^32 - 1", after: step("B1", "seal"),
            envelope: try resealed("A5 with message number 2^32 - 1", "A5") { $0.replaceSubrange(numberAt..<(numberAt + 4), with: u32(.max)) },
            id: message("A5").id, expect: "envelope_too_many_skipped")
        add("A3 with message number 2^32 - 1, replayed after the ratchet turned (step 3.1 before 4)", after: step("A5", "open"),
            envelope: try resealed("A3 with message number 2^32 - 1, replayed after the ratchet turned (step 3.1 before 4)", "A3") {
                $0.replaceSubrange(startNumberAt..<(startNumberAt + 4), with: u32(.max))
            }, id: message("A3").id, expect: "envelope_stale_message")

        // §4.4 step 6, opened by alice: before bob answers she has no receiving chain, and her peer
        // ratchet key is bob's signed prekey. A record from bob under that key takes no DH step
        // and finds no chain key (message number 0), or is refused by step 4 first (2^32 − 1).
        let toAlice = { (name: String, number: UInt32) throws -> (String, [UInt8]) in
            let id = vectorMessageID(number == 0 ? "K0" : "K1")
            var record: [UInt8] = [0x02, 3] + Array("bob".utf8) + bobKeys.publicKey.bytes + [5] + Array("alice".utf8) + [UInt8(id.utf8.count)]
            record += Array(id.utf8) + s1 + [0x00] + x25519("bob_signed_prekey").publicKey.bytes + u32(0) + u32(number)
            record += u32(48) + [UInt8](repeating: 0x5A, count: 48)
            return (id, alice.mailbox.publicKey.seal(try Envelope.pad(record), ephemeralSeed: ephemeralSeed(name)))
        }
        for (number, expect) in [(UInt32(0), "envelope_stale_message"), (.max, "envelope_too_many_skipped")] {
            let name = number == 0
                ? "to alice before an answer, under bob's signed prekey: no receiving chain (step 6)"
                : "to alice before an answer, under bob's signed prekey, message number 2^32 - 1 (step 4 before 6)"
            let (id, envelope) = try toAlice(name, number)
            add(name, after: step("A4", "seal"), envelope: envelope, id: id, expect: expect, recipient: "alice", opener: "alice")
        }

        // The 16 retired ratchet keys (§4.2, §4.4 step 3): from the end of the conversation, alice
        // and bob take turns until bob has made 16 more DH steps. Bob then holds as retired A5's
        // key and the 15 after it; A1's, retired before them, is forgotten: a replay of A5 is
        // stale, a replay of A1 is taken for a new ratchet key and fails to decrypt.
        var pingAlice = alice, pingBob = bob
        var pings: [(id: String, envelope: [UInt8])] = [], pingSeeds: [String] = []
        for round in 1...retiredKeyRounds {
            let name = "ping \(round)", id = vectorMessageID("R\(round)")
            var ratchet = try #require(pingAlice.ratchets[s1])
            let envelope = try Envelope.seal(body: textBody("ping \(round)", from: "alice"), id: id, from: "alice", identity: pingAlice.identity,
                                             to: "bob", mailboxKey: bob.mailbox.publicKey, ratchet: &ratchet,
                                             outerSeal: { bob.mailbox.publicKey.seal($0, ephemeralSeed: ephemeralSeed(name)) })
            pingAlice.ratchets[s1] = ratchet
            pings.append((id, envelope))
            pingSeeds.append("bob_turn_\(round)")
            _ = try pingBob.open(envelope, id: id, now: now, newRatchetKey: { x25519("bob_turn_\(round)") })
            guard round < retiredKeyRounds else { break }
            let replyID = vectorMessageID("Q\(round)")
            var reply = try #require(pingBob.ratchets[s1])
            let answer = try Envelope.seal(body: textBody("pong \(round)", from: "bob"), id: replyID, from: "bob", identity: pingBob.identity,
                                           to: "alice", mailboxKey: alice.mailbox.publicKey, ratchet: &reply,
                                           outerSeal: { alice.mailbox.publicKey.seal($0, ephemeralSeed: ephemeralSeed("pong \(round)")) })
            pingBob.ratchets[s1] = reply
            _ = try pingAlice.open(answer, id: replyID, now: now, newRatchetKey: { x25519("alice_turn_\(round)") })
        }
        #expect(pingBob.ratchets[s1]!.state.retiredPeerKeys.count == 16, "bob keeps 16 retired keys")
        add("A5 replayed after 16 more DH steps (its key the oldest of the 16 retired)", after: events.count,
            envelope: message("A5").envelope, id: message("A5").id, expect: "envelope_stale_message", prior: pings, priorSeeds: pingSeeds)
        add("A1 replayed after 16 more DH steps (its key retired before the 16 kept)", after: events.count,
            envelope: message("A1").envelope, id: message("A1").id, expect: "envelope_session_mismatch", prior: pings, priorSeeds: pingSeeds)
        #expect(Set(cases.map { $0["expect"] as! String }).isSuperset(of: ["envelope_no_session", "envelope_unknown_prekey", "envelope_session_mismatch",
                                                                          "envelope_stale_message", "envelope_too_many_skipped"]))
        // The first message's record and associated data, for implementers.
        let a1 = try record("A1")
        let ciphertextLength = Int(u32Read(a1, at: kindAt + 1 + 40 + 32 + 8))
        let prefix = Array(a1[..<(kindAt + 1 + 40 + 32 + 8)])
        #expect(prefix.count + 4 + ciphertextLength == a1.count)
        ratchetVector["first_record"] = ["message": "A1", "record_hex": hexString(a1),
                                   "associated_data_hex": hexString(preAuthenticationEncoding([Array("mailslot-envelope-v2".utf8), prefix, bobKeys.publicKey.bytes]))]
        return (ratchetVector, events, cases)
    }

    static func u32Read(_ bytes: [UInt8], at offset: Int) -> UInt32 { bytes[offset..<(offset + 4)].reduce(0) { $0 << 8 | UInt32($1) } }

    static func ratchetVectors() throws -> [String: Any] {
        let (bundle, bundleCases) = try ratchetBundle()
        let (ratchet, conversation, cases) = try ratchetConversation()
        return [
            "description": "Ratchets with forward secrecy (spec/ratchet.md): HKDF, X3DH, the Double Ratchet and envelope record version 2. Replay `conversation` in order with both users' own state; open each of `cases` with its opener's state (bob's, or alice's when `opener` says so) after step `after_step` of the conversation, at `now`, after its `prior` envelopes; `expect` is \"ok\" or the error code.",
            "seeds": Dictionary(uniqueKeysWithValues: ratchetSeeds.map { ($0.key, Base64URL.encode($0.value)) }),
            "users": [["uid": "alice", "identity_seed": "alice_identity", "mailbox_seed": "alice_mailbox"],
                      ["uid": "bob", "identity_seed": "bob_identity", "mailbox_seed": "bob_mailbox",
                       "signed_prekey": ["id": Int(signedPrekeyID), "seed": "bob_signed_prekey"],
                       "one_time_prekeys": [["id": Int(oneTimePrekeyID), "seed": "bob_one_time_prekey"]]]],
            "now": Int(now),
            "hkdf": hkdfCases(),
            "identities": identityCases(),
            "prekeys": prekeyCases(),
            "bundle": bundle,
            "bundles": bundleCases,
            "x3dh": [try x3dhCase(name: "S1, with a one-time prekey", ephemeral: "alice_ephemeral", ratchet: "alice_ratchet_1", oneTime: true),
                     try x3dhCase(name: "S2, without a one-time prekey", ephemeral: "alice_ephemeral_2", ratchet: "alice_ratchet_4", oneTime: false)],
            "ratchet": ratchet,
            "conversation": conversation,
            "cases": cases,
        ]
    }

    // MARK: The test

    @Test func ratchets() throws {
        let generated = try Self.ratchetVectors()
        if Self.writing { try Self.write("sessions.json", generated) }
        let vectors = try Self.read("sessions.json")
        #expect(try Self.same(generated, vectors), "sessions.json is what the generator makes from the published seeds")
        try Self.checkRatchetVectors(vectors, minimumEvents: 14, minimumCases: 25)
    }

    /// Ratchets sealed by the independent implementation (tools/interop, PyNaCl), from the spec alone:
    /// the reference opens its conversation, seals every message again to the same bytes, and
    /// refuses its cases with the codes it names.
    @Test func independentRatchets() throws {
        try Self.checkRatchetVectors(try Self.read("independent/sessions.json"), minimumEvents: 10, minimumCases: 8)
    }

    /// Replays the file alone: bundles, the conversation with each side's own state, and the cases.
    static func checkRatchetVectors(_ vectors: [String: Any], minimumEvents: Int, minimumCases: Int) throws {
        // Every key from the file's own seeds, so that a file written by another implementation
        // (spec/vectors/independent/) is checked the same way.
        let seeds = try #require(vectors["seeds"] as? [String: String]).compactMapValues { Base64URL.decode($0) }
        func seed(_ name: Any?) throws -> SecretBytes {
            let name = try #require(name as? String)
            return SecretBytes(copying: try #require(seeds[name], "seed \(name) is published"))
        }
        func pair(_ name: Any?) throws -> X25519KeyPair { X25519KeyPair(seed: try seed(name)) }
        let users = try #require(vectors["users"] as? [[String: Any]])
        func user(_ index: Int) throws -> VectorUser {
            let info = users[index]
            var user = VectorUser(uid: try #require(info["uid"] as? String),
                                  identity: IdentityKeyPair(seed: try seed(info["identity_seed"])),
                                  mailbox: try pair(info["mailbox_seed"]))
            if let signed = info["signed_prekey"] as? [String: Any] { user.signedPrekeys[UInt32(signed["id"] as! Int)] = try pair(signed["seed"]) }
            for oneTime in info["one_time_prekeys"] as? [[String: Any]] ?? [] { user.oneTimePrekeys[UInt32(oneTime["id"] as! Int)] = try pair(oneTime["seed"]) }
            return user
        }
        var alice = try user(0), bob = try user(1)
        let caseRatchet = try pair("case_ratchet")
        for vector in vectors["bundles"] as? [[String: Any]] ?? [] {
            let name = vector["name"] as! String, expect = vector["expect"] as! String
            do {
                _ = try KeyBundle.decode(Array((vector["bundle"] as! String).utf8), for: vector["expected_uid"] as? String)
                #expect(expect == "ok", "\(name)")
            } catch {
                #expect(error.code == expect, "\(name)")
            }
        }
        let now = Int64(try #require(vectors["now"] as? Int))
        var states: [VectorUser] = [bob], aliceStates: [VectorUser] = [alice]
        var messages: [String: [String: Any]] = [:]
        var ratchetIDs: [String: [UInt8]] = [:], started: [String: Ratchet] = [:]
        for start in try #require(vectors["x3dh"] as? [[String: Any]]) {
            let ratchet = try Ratchet.initiate(
                identity: alice.identity, peerIdentity: bob.identity.publicKey,
                signedPrekey: PublishedPrekey(id: UInt32(start["signed_prekey_id"] as! Int),
                                              key: try #require(bob.signedPrekeys[UInt32(start["signed_prekey_id"] as! Int)]).publicKey),
                oneTimePrekey: try (start["one_time_prekey_id"] as? Int).map { PublishedPrekey(id: UInt32($0), key: try #require(bob.oneTimePrekeys[UInt32($0)]).publicKey) },
                ephemeral: try pair(start["ephemeral_seed"]), ratchetKey: try pair(start["ratchet_seed"]))
            #expect(Self.hexString(ratchet.id) == start["session_id_hex"] as? String)
            ratchetIDs[start["session"] as! String] = ratchet.id
            started[start["session"] as! String] = ratchet  // Alice holds it from her first message on
        }
        let events = try #require(vectors["conversation"] as? [[String: Any]])
        #expect(events.count >= minimumEvents)
        for event in events {
            let name = event["message"] as! String
            if event["event"] as? String == "seal" {
                // Sealed again from the sender's own state and the published seed: byte for byte.
                messages[name] = event
                let label = event["session"] as! String, id = try #require(ratchetIDs[label])
                let fromAlice = event["from"] as? String == "alice"
                if fromAlice, alice.ratchets[id] == nil { alice.ratchets[id] = started[label] }
                let (sender, recipient) = fromAlice ? (alice, bob) : (bob, alice)
                var ratchet = try #require(sender.ratchets[id])
                let seed = try #require(Base64URL.decode(event["ephemeral_seed"] as! String))
                let envelope = try Envelope.seal(body: Array((event["body"] as! String).utf8), id: event["id"] as! String, from: sender.uid,
                                                 identity: sender.identity, to: recipient.uid, mailboxKey: recipient.mailbox.publicKey,
                                                 ratchet: &ratchet, outerSeal: { recipient.mailbox.publicKey.seal($0, ephemeralSeed: seed) })
                #expect(Base64URL.encode(envelope) == event["envelope"] as? String, "\(name) is sealed again byte for byte")
                if fromAlice { alice.ratchets[id] = ratchet } else { bob.ratchets[id] = ratchet }
            } else {
                let message = try #require(messages[name])
                let envelope = try #require(Base64URL.decode(message["envelope"] as! String))
                let turning = try event["new_ratchet_seed"].map { try pair($0) }
                var turned = false
                let newKey = { () -> X25519KeyPair in turned = true; return turning ?? caseRatchet }
                let opened = event["by"] as? String == "bob"
                    ? try bob.open(envelope, id: message["id"] as! String, now: now, newRatchetKey: newKey)
                    : try alice.open(envelope, id: message["id"] as! String, now: now, newRatchetKey: newKey)
                #expect(String(decoding: opened.body, as: UTF8.self) == message["body"] as? String, "\(name)")
                #expect(turned == (turning != nil), "\(name): the ratchet turns exactly when the vector says")
            }
            states.append(bob)
            aliceStates.append(alice)
        }
        let cases = try #require(vectors["cases"] as? [[String: Any]])
        #expect(cases.count >= minimumCases)
        for vector in cases {
            let name = vector["name"] as! String, expect = vector["expect"] as! String
            // Bob opens every case unless `opener` names alice (spec/ratchet.md §9).
            var user = (vector["opener"] as? String ?? "bob") == "alice" ? aliceStates[vector["after_step"] as! Int] : states[vector["after_step"] as! Int]
            let ownIdentity = (vector["opener_identity"] as? String).flatMap { IdentityPublicKey(bytes: Base64URL.decode($0) ?? []) }
            do {
                for earlier in vector["prior"] as? [[String: String]] ?? [] {
                    let turning = try earlier["new_ratchet_seed"].map { try pair($0) } ?? caseRatchet
                    _ = try user.open(try #require(Base64URL.decode(earlier["envelope"]!)), id: earlier["id"]!, now: Int64(vector["now"] as! Int),
                                      newRatchetKey: { turning })
                }
                let opened = try user.open(try #require(Base64URL.decode(vector["envelope"] as! String)), id: vector["id"] as! String,
                                           as: vector["recipient"] as? String, ownIdentity: ownIdentity,
                                           now: Int64(vector["now"] as! Int), newRatchetKey: { caseRatchet })
                #expect(expect == "ok", "\(name): opened, expected \(expect)")
                #expect(String(decoding: opened.body, as: UTF8.self) == vector["body"] as? String, "\(name)")
            } catch {
                #expect(error.code == expect, "\(name)")
            }
        }
    }
}
