import Foundation
import Testing
@testable import MailslotCrypto

/// HKDF against RFC 5869, and ratchets (X3DH and the Double Ratchet) end to end: round trips,
/// order, loss, replay, forgery, and the forward-secrecy and healing properties themselves.
@Suite struct RatchetTests {
    // MARK: Primitives

    @Test func hkdfMatchesRFC5869() {
        // RFC 5869 appendix A, test cases 1–3 (SHA-256).
        #expect(hkdfSHA256(salt: Array(0x00...0x0c), inputKeyMaterial: [UInt8](repeating: 0x0b, count: 22),
                           info: Array(0xf0...0xf9), length: 42)
                == hex("3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865"))
        #expect(hkdfSHA256(salt: Array(0x60...0xaf), inputKeyMaterial: Array(0x00...0x4f), info: Array(0xb0...0xff), length: 82)
                == hex("b11e398dc80327a1c8e7f78c596a49344f012eda2d4efad8a050cc4c19afa97c59045a99cac7827271cb41c65e590e09da3275600c2f09b8367793a9aca3db71cc30c58179ec3e87c14c01d5c1f3434f1d87"))
        #expect(hkdfSHA256(salt: [], inputKeyMaterial: [UInt8](repeating: 0x0b, count: 22), info: [], length: 42)
                == hex("8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8"))
        // RFC 4231 test case 1 for the HMAC underneath.
        #expect(hmacSHA256(key: [UInt8](repeating: 0x0b, count: 20), Array("Hi There".utf8))
                == hex("b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"))
    }

    @Test func keyAgreementRefusesAllZeroOutputs() {
        let pair = X25519KeyPair()
        #expect(pair.agree(with: X25519PublicKey(bytes: [UInt8](repeating: 0, count: 32))!) == nil)
        // The order-8 point of Curve25519 (RFC 7748 §5 lists the low-order points): also zero.
        #expect(pair.agree(with: X25519PublicKey(bytes: hex("e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800"))!) == nil)
        let other = X25519KeyPair()
        #expect(pair.agree(with: other.publicKey) == other.agree(with: pair.publicKey))
        // The identity key's X25519 form agrees with its public key's X25519 form.
        let identity = IdentityKeyPair()
        #expect(identity.agreementKeyPair.publicKey == identity.publicKey.agreementKey)
    }

    // MARK: A conversation

    /// One side of a conversation: keys, prekeys and the ratchets it holds.
    final class Side: @unchecked Sendable {
        let uid: String
        let identity = IdentityKeyPair()
        let mailbox = MailboxKeyPair()
        let signedPrekey = X25519KeyPair()
        var oneTimePrekeys: [UInt32: X25519KeyPair] = [:]
        var ratchets: [[UInt8]: Ratchet] = [:]
        var now: Int64 = 1_800_000_000

        init(_ uid: String, oneTimePrekeys count: UInt32 = 3) {
            self.uid = uid
            for id in 1...max(1, count) where count > 0 { oneTimePrekeys[id] = X25519KeyPair() }
        }

        var bundle: KeyBundle {
            KeyBundle(uid: uid, identity: identity, mailboxKey: mailbox.publicKey, signedPrekey: PublishedPrekey(id: 7, key: signedPrekey.publicKey))
        }

        /// Claims (and removes) the lowest one-time prekey, as the relay does.
        func claim() -> PublishedPrekey? {
            guard let id = oneTimePrekeys.keys.min() else { return nil }
            return PublishedPrekey(id: id, key: oneTimePrekeys[id]!.publicKey)
        }

        func start(with peer: Side, useOneTimePrekey: Bool = true) throws -> [UInt8] {
            let bundle = try KeyBundle.decode(peer.bundle.encoded(), for: peer.uid)
            let ratchet = try Ratchet.initiate(identity: identity, peerIdentity: bundle.identityKey,
                                               signedPrekey: bundle.signedPrekey!, oneTimePrekey: useOneTimePrekey ? peer.claim() : nil)
            ratchets[ratchet.id] = ratchet
            return ratchet.id
        }

        func send(_ text: String, to peer: Side, in ratchetID: [UInt8], id: String = Side.newID()) throws -> (id: String, envelope: [UInt8]) {
            var ratchet = try #require(ratchets[ratchetID])
            let message = ChatMessage(type: .text, sender: Sender(id: uid), payload: Payload(text: text), timestamp: 1)
            let envelope = try Envelope.seal(message, id: id, from: uid, identity: identity, to: peer.uid,
                                             mailboxKey: peer.mailbox.publicKey, ratchet: &ratchet)
            ratchets[ratchetID] = ratchet
            return (id, envelope)
        }

        /// Opens as a client does: unseal, find or accept the ratchet, open, keep the new state.
        @discardableResult
        func receive(_ delivery: (id: String, envelope: [UInt8])) throws(EnvelopeError) -> String {
            guard case .version2(let sealed) = try Envelope.unseal(delivery.envelope, id: delivery.id, recipient: uid, keys: mailbox) else {
                throw .unsupportedVersion(1)
            }
            let ratchet: Ratchet
            var acceptedPrekey: UInt32?
            if let known = ratchets[sealed.ratchetID] {
                ratchet = known
            } else {
                guard let start = sealed.start, start.signedPrekeyID == 7 else { throw sealed.start == nil ? .noRatchet : .unknownPrekey }
                var oneTime: X25519KeyPair?
                if let id = start.oneTimePrekeyID {
                    guard let pair = oneTimePrekeys[id] else { throw .unknownPrekey }
                    oneTime = pair
                    acceptedPrekey = id
                }
                ratchet = try Ratchet.accept(sealed, identity: identity, signedPrekey: signedPrekey, oneTimePrekey: oneTime)
            }
            let (opened, next) = try sealed.open(with: ratchet, identity: identity.publicKey, now: now)
            ratchets[next.id] = next
            if let acceptedPrekey { oneTimePrekeys[acceptedPrekey] = nil }  // one-time: erased once used
            return opened.message.payload.text ?? ""
        }

        static func newID() -> String { "m" + Base64URL.encode(randomBytes(16)) }
    }

    @Test func aConversationRoundTripsBothWays() throws {
        let alice = Side("alice"), bob = Side("bob")
        let ratchet = try alice.start(with: bob)
        #expect(alice.ratchets[ratchet]!.start != nil)
        #expect(try bob.receive(try alice.send("hello bob", to: bob, in: ratchet)) == "hello bob")
        #expect(try bob.receive(try alice.send("second", to: bob, in: ratchet)) == "second")
        #expect(bob.oneTimePrekeys[1] == nil, "the one-time prekey is erased once used")
        #expect(try alice.receive(try bob.send("hi alice", to: alice, in: ratchet)) == "hi alice")
        #expect(alice.ratchets[ratchet]!.start == nil, "the answer ends the ratchet start")
        for round in 0..<5 {
            #expect(try bob.receive(try alice.send("a\(round)", to: bob, in: ratchet)) == "a\(round)")
            #expect(try alice.receive(try bob.send("b\(round)", to: alice, in: ratchet)) == "b\(round)")
        }
    }

    @Test func aRatchetStartsWithoutAOneTimePrekey() throws {
        let alice = Side("alice"), bob = Side("bob", oneTimePrekeys: 0)
        let ratchet = try alice.start(with: bob)
        #expect(alice.ratchets[ratchet]!.start?.oneTimePrekeyID == nil)
        #expect(try bob.receive(try alice.send("fallback", to: bob, in: ratchet)) == "fallback")
    }

    @Test func lostAndReorderedMessagesOpen() throws {
        let alice = Side("alice"), bob = Side("bob")
        let ratchet = try alice.start(with: bob)
        let sent = try (0..<6).map { try alice.send("m\($0)", to: bob, in: ratchet) }
        // The start message itself arrives last; one message never arrives.
        for index in [3, 1, 5, 0, 2] { #expect(try bob.receive(sent[index]) == "m\(index)") }
        let reply = try bob.send("r", to: alice, in: ratchet)
        #expect(try alice.receive(reply) == "r")
        // Messages of an old chain still open after the ratchet turned.
        let old = try alice.send("before", to: bob, in: ratchet)
        _ = try bob.receive(try alice.send("after", to: bob, in: ratchet))
        #expect(try bob.receive(old) == "before")
        #expect(bob.ratchets[ratchet]!.state.skipped.count == 1, "m4's key alone stays skipped")
    }

    @Test func replaysAreRefusedAndLeaveTheRatchetAlone() throws {
        let alice = Side("alice"), bob = Side("bob")
        let ratchet = try alice.start(with: bob)
        let first = try alice.send("once", to: bob, in: ratchet)
        _ = try bob.receive(first)
        let before = bob.ratchets[ratchet]!.serialized()
        #expect(throws: EnvelopeError.staleMessage) { try bob.receive(first) }
        #expect(bob.ratchets[ratchet]!.serialized() == before)
        // A replay from a chain the ratchet has left behind is stale too.
        _ = try alice.receive(try bob.send("turn", to: alice, in: ratchet))
        _ = try bob.receive(try alice.send("new chain", to: bob, in: ratchet))
        #expect(throws: EnvelopeError.staleMessage) { try bob.receive(first) }
    }

    @Test func forgedOrMisdirectedMessagesAreRefused() throws {
        let alice = Side("alice"), bob = Side("bob"), mallory = Side("mallory")
        let ratchet = try alice.start(with: bob)
        _ = try bob.receive(try alice.send("hello", to: bob, in: ratchet))
        // Mallory's message, of a ratchet of her own, does not open in Alice's ratchet.
        let malloryID = try mallory.start(with: bob)
        let forged = try mallory.send("it is alice", to: bob, in: malloryID)
        guard case .version2(let sealed) = try Envelope.unseal(forged.envelope, id: forged.id, recipient: "bob", keys: bob.mailbox) else {
            Issue.record("not version 2"); return
        }
        #expect(throws: EnvelopeError.ratchetMismatch) {
            _ = try sealed.open(with: bob.ratchets[ratchet]!, identity: bob.identity.publicKey, now: 0)
        }
        // A record altered inside a valid outer layer (as a holder of Bob's mailbox key could) fails,
        // whichever byte changed, and does not move the ratchet.
        let next = try alice.send("untouched", to: bob, in: ratchet)
        for position in [-1, -20, 60] {
            let altered = try EnvelopeCrafter.reseal(next.envelope, keys: bob.mailbox) { record in
                record[position < 0 ? record.count + position : position] ^= 1
            }
            #expect(throws: EnvelopeError.self) { try bob.receive((next.id, altered)) }
        }
        // For another recipient identity (Bob's record read as if Carol held the ratchet) it fails too.
        guard case .version2(let intact) = try Envelope.unseal(next.envelope, id: next.id, recipient: "bob", keys: bob.mailbox) else {
            Issue.record("sealed as version 1: sealing must produce version 2"); return
        }
        #expect(throws: EnvelopeError.ratchetMismatch) {
            _ = try intact.open(with: bob.ratchets[ratchet]!, identity: IdentityKeyPair().publicKey, now: 0)
        }
        #expect(try bob.receive(next) == "untouched")
    }

    @Test func aMessageWithoutAKnownRatchetOrPrekeyIsRefused() throws {
        let alice = Side("alice"), bob = Side("bob")
        let ratchet = try alice.start(with: bob)
        let first = try alice.send("one", to: bob, in: ratchet)
        _ = try bob.receive(first)
        _ = try alice.receive(try bob.send("ack", to: alice, in: ratchet))
        let normal = try alice.send("no start fields now", to: bob, in: ratchet)
        bob.ratchets = [:]  // Bob lost his ratchets
        #expect(throws: EnvelopeError.noRatchet) { try bob.receive(normal) }
        #expect(throws: EnvelopeError.unknownPrekey) { try bob.receive(first) }  // its one-time prekey is gone
    }

    @Test func tooManySkippedKeysAreRefused() throws {
        let alice = Side("alice"), bob = Side("bob")
        let ratchet = try alice.start(with: bob)
        _ = try bob.receive(try alice.send("start", to: bob, in: ratchet))
        for _ in 0...RatchetState.maxSkip { _ = try alice.send("lost", to: bob, in: ratchet) }
        let far = try alice.send("far", to: bob, in: ratchet)
        #expect(throws: EnvelopeError.tooManySkipped) { try bob.receive(far) }
        #expect(bob.ratchets[ratchet]!.state.skipped.isEmpty, "the refused message kept nothing")
        // At exactly the limit the message opens and every skipped key is kept.
        let alice2 = Side("alice"), bob2 = Side("bob")
        let second = try alice2.start(with: bob2)
        _ = try bob2.receive(try alice2.send("start", to: bob2, in: second))
        for _ in 1..<RatchetState.maxSkip { _ = try alice2.send("lost", to: bob2, in: second) }
        #expect(try bob2.receive(try alice2.send("edge", to: bob2, in: second)) == "edge")
        #expect(bob2.ratchets[second]!.state.skipped.count == Int(RatchetState.maxSkip) - 1)
    }

    @Test func skippedKeysExpireWithTheLongestMessageLifetime() throws {
        let alice = Side("alice"), bob = Side("bob")
        let ratchet = try alice.start(with: bob)
        let late = try alice.send("late", to: bob, in: ratchet)
        _ = try bob.receive(try alice.send("on time", to: bob, in: ratchet))
        bob.now += RatchetState.skippedKeyLifetime + 1
        _ = try bob.receive(try alice.send("much later", to: bob, in: ratchet))
        #expect(throws: EnvelopeError.staleMessage) { try bob.receive(late) }  // its key is gone
        #expect(bob.ratchets[ratchet]!.state.skipped.isEmpty)
    }

    @Test func aRatchetSurvivesItsStorageForm() throws {
        let alice = Side("alice"), bob = Side("bob")
        let ratchet = try alice.start(with: bob)
        let lost = try alice.send("skipped", to: bob, in: ratchet)
        _ = try bob.receive(try alice.send("hello", to: bob, in: ratchet))
        for side in [alice, bob] {
            let bytes = side.ratchets[ratchet]!.serialized()
            let restored = try #require(Ratchet(serialized: bytes))
            #expect(restored.serialized() == bytes)
            side.ratchets[ratchet] = restored
        }
        #expect(try bob.receive(lost) == "skipped")
        #expect(try alice.receive(try bob.send("back", to: alice, in: ratchet)) == "back")
        // Damaged storage is refused, not half-read.
        var bytes = bob.ratchets[ratchet]!.serialized()
        #expect(Ratchet(serialized: Array(bytes.dropLast())) == nil)
        bytes[0] = 9
        #expect(Ratchet(serialized: bytes) == nil)
    }

    // MARK: The properties

    /// Forward secrecy: a thief who takes everything the recipient holds after it received some
    /// messages cannot open those messages, however it uses what it took.
    @Test func stolenStateDoesNotOpenCapturedMessages() throws {
        let alice = Side("alice"), bob = Side("bob")
        let ratchet = try alice.start(with: bob)
        var captured: [(id: String, envelope: [UInt8])] = []
        for round in 0..<3 {
            for index in 0..<3 {
                let delivery = try alice.send("secret \(round).\(index)", to: bob, in: ratchet)
                captured.append(delivery)
                _ = try bob.receive(delivery)
            }
            _ = try alice.receive(try bob.send("ok", to: alice, in: ratchet))
        }
        // The theft: identity, mailbox key, signed prekey, remaining one-time prekeys, every ratchet.
        let stolen = try #require(Ratchet(serialized: bob.ratchets[ratchet]!.serialized()))
        for delivery in captured {
            // The outer layer opens (the mailbox key is long-lived); the body must not.
            guard case .version2(let sealed) = try Envelope.unseal(delivery.envelope, id: delivery.id, recipient: "bob", keys: bob.mailbox) else {
                Issue.record("not version 2"); continue
            }
            // 1. With the stolen ratchet as it is.
            #expect(throws: EnvelopeError.self) { _ = try sealed.open(with: stolen, identity: bob.identity.publicKey, now: bob.now) }
            // 2. With its counters wound back, as a thief ignoring the bookkeeping would.
            var rewound = stolen
            rewound.state.rewindForTesting()
            #expect(throws: EnvelopeError.self) { _ = try sealed.open(with: rewound, identity: bob.identity.publicKey, now: bob.now) }
            // 3. By deriving the ratchet again from the stolen long-term keys (the one-time prekey is gone).
            if sealed.start != nil {
                for candidate in [nil] + bob.oneTimePrekeys.values.map(Optional.some) {
                    let fresh = try? Ratchet.accept(sealed, identity: bob.identity, signedPrekey: bob.signedPrekey, oneTimePrekey: candidate)
                    if let fresh {
                        #expect(throws: EnvelopeError.self) { _ = try sealed.open(with: fresh, identity: bob.identity.publicKey, now: bob.now) }
                    }
                }
            }
        }
    }

    /// Healing: after a theft, once both sides have sent after a ratchet step, new messages do not
    /// open with the stolen state — though they did before that, which shows the theft was real.
    @Test func theRatchetHealsAfterATheft() throws {
        let alice = Side("alice"), bob = Side("bob")
        let ratchet = try alice.start(with: bob)
        _ = try bob.receive(try alice.send("a1", to: bob, in: ratchet))
        let stolen = try #require(Ratchet(serialized: bob.ratchets[ratchet]!.serialized()))

        _ = try alice.receive(try bob.send("b1", to: alice, in: ratchet))  // Bob's key from before the theft
        let a2 = try alice.send("a2", to: bob, in: ratchet)
        guard case .version2(let sealedA2) = try Envelope.unseal(a2.envelope, id: a2.id, recipient: "bob", keys: bob.mailbox) else {
            Issue.record("sealed as version 1: sealing must produce version 2"); return
        }
        let (readByThief, _) = try sealedA2.open(with: stolen, identity: bob.identity.publicKey, now: bob.now)
        #expect(readByThief.message.payload.text == "a2", "before healing the stolen state reads on")

        _ = try bob.receive(a2)                                            // Bob turns: a key the thief never saw
        _ = try alice.receive(try bob.send("b2", to: alice, in: ratchet))
        for text in ["a3", "a4"] {
            let delivery = try alice.send(text, to: bob, in: ratchet)
            guard case .version2(let sealed) = try Envelope.unseal(delivery.envelope, id: delivery.id, recipient: "bob", keys: bob.mailbox) else {
                Issue.record("sealed as version 1: sealing must produce version 2"); return
            }
            #expect(throws: EnvelopeError.ratchetMismatch) { _ = try sealed.open(with: stolen, identity: bob.identity.publicKey, now: bob.now) }
            #expect(try bob.receive(delivery) == text)
        }
    }

    @Test func lowOrderPrekeysAreRefused() throws {
        let alice = Side("alice"), bob = Side("bob")
        let zero = X25519PublicKey(bytes: [UInt8](repeating: 0, count: 32))!
        #expect(throws: EnvelopeError.ratchetMismatch) {
            _ = try Ratchet.initiate(identity: alice.identity, peerIdentity: bob.identity.publicKey,
                                     signedPrekey: PublishedPrekey(id: 1, key: zero), oneTimePrekey: nil)
        }
        #expect(throws: EnvelopeError.ratchetMismatch) {
            _ = try Ratchet.initiate(identity: alice.identity, peerIdentity: bob.identity.publicKey,
                                     signedPrekey: PublishedPrekey(id: 1, key: bob.signedPrekey.publicKey),
                                     oneTimePrekey: PublishedPrekey(id: 2, key: zero))
        }
    }

    /// A stored ratchet at the end of its counters (damaged, or 2³² messages in one chain) is
    /// refused, never wrapped: the counters are message numbers, and a wrap would reuse keys.
    @Test func countersAtTheirEndAreRefusedNotWrapped() throws {
        let alice = Side("alice"), bob = Side("bob")
        let ratchet = try alice.start(with: bob)
        alice.ratchets[ratchet]!.state.sent = .max
        #expect(throws: EnvelopeError.noRatchet) { _ = try alice.send("one more", to: bob, in: ratchet) }
        alice.ratchets[ratchet]!.state.sent = 0
        let first = try alice.send("first", to: bob, in: ratchet)
        _ = try bob.receive(first)
        let header = RatchetHeader(ratchetKey: alice.ratchets[ratchet]!.state.ownRatchet.publicKey, previousChainLength: 0,
                                   messageNumber: .max)
        var receiving = bob.ratchets[ratchet]!.state
        receiving.received = .max
        #expect(throws: EnvelopeError.tooManySkipped) { _ = try receiving.receiving(header, now: 0) }
    }

    @Test func prekeyIdZeroIsRefusedWhenStarting() throws {
        let alice = Side("alice"), bob = Side("bob")
        let key = bob.signedPrekey.publicKey
        for (signed, oneTime) in [(PublishedPrekey(id: 0, key: key), nil), (PublishedPrekey(id: 7, key: key), PublishedPrekey(id: 0, key: key))] {
            #expect(throws: EnvelopeError.malformedRecord("a prekey id is 0")) {
                _ = try Ratchet.initiate(identity: alice.identity, peerIdentity: bob.identity.publicKey, signedPrekey: signed, oneTimePrekey: oneTime)
            }
        }
    }

    // MARK: Key bundles with a signed prekey

    @Test func versionTwoBundlesSignTheirPrekey() throws {
        let bob = Side("bob")
        let bundle = bob.bundle
        #expect(bundle.version == 2)
        let decoded = try KeyBundle.decode(bundle.encoded(), for: "bob")
        #expect(decoded == bundle)
        #expect(decoded.keyID == KeyBundle(uid: "bob", identity: bob.identity, mailboxKey: bob.mailbox.publicKey).keyID,
                "a new signed prekey keeps the key id: senders are not told their keys are stale")
        // Another prekey under the same signature fails.
        var json = try #require(try JSONSerialization.jsonObject(with: Data(bundle.encoded())) as? [String: Any])
        json["signed_prekey"] = Base64URL.encode(X25519KeyPair().publicKey.bytes)
        #expect(throws: KeyBundleError.badSignature) { try KeyBundle.decode(Array(try JSONSerialization.data(withJSONObject: json)), for: "bob") }
        json["signed_prekey"] = Base64URL.encode(bob.signedPrekey.publicKey.bytes)
        json["version"] = 1
        #expect(throws: KeyBundleError.malformed("a version 1 bundle has no signed prekey")) {
            try KeyBundle.decode(Array(try JSONSerialization.data(withJSONObject: json)), for: "bob")
        }
        json["version"] = 2
        json["signed_prekey_id"] = NSNull()
        #expect(throws: KeyBundleError.self) { try KeyBundle.decode(Array(try JSONSerialization.data(withJSONObject: json)), for: "bob") }
        json["signed_prekey_id"] = nil
        #expect(throws: KeyBundleError.self) { try KeyBundle.decode(Array(try JSONSerialization.data(withJSONObject: json)), for: "bob") }
    }
}

extension RatchetState {
    /// Winds the receiving counter back to 0, as a thief ignoring the bookkeeping would.
    mutating func rewindForTesting() {
        received = 0
        skipped = []
        retiredPeerKeys = []
    }
}

extension EnvelopeCrafter {
    /// Opens `envelope`'s outer layer, lets `change` alter the record, and seals it again.
    static func reseal(_ envelope: [UInt8], keys: MailboxKeyPair, change: (inout [UInt8]) -> Void) throws -> [UInt8] {
        let padded = try #require(keys.open(sealed: envelope))
        let marker = try #require(padded.lastIndex(of: 0x80))
        var record = Array(padded[..<marker])
        change(&record)
        return keys.publicKey.testSeal(try Envelope.pad(record))
    }
}
