import Foundation
import GRDB
@testable import MailslotClient
import MailslotTestSupport
import MailslotWire
import Testing

/// Ratchets with forward secrecy between clients of a real relay (spec/ratchet.md §6): sent by
/// default, prekeys used up and topped up, starts at the same moment, a contact that lost its
/// ratchets, and the property itself on a stolen store.
@Suite struct RatchetExchangeTests {
    /// The envelopes waiting in `uid`'s mailbox, as the relay (or anyone recording it) holds them.
    func capture(_ relay: TestRelay, _ uid: String) async throws -> [MessageRecord] {
        let page = try await relay.call("GET", "/v1/users/\(uid)/messages", session: try await relay.signIn(uid).session)
        return try page.decoded(MessagePage.self).messages
    }

    func prekeysLeft(_ relay: TestRelay, _ uid: String) async throws -> Int {
        let answer = try await relay.call("GET", "/v1/users/\(uid)/prekeys", session: try await relay.signIn(uid).session)
        return try answer.decoded(PrekeyCount.self).count
    }

    /// The record version inside an envelope, opened with `client`'s own mailbox key.
    func version(of record: MessageRecord, for client: MailslotClient) async throws -> UInt8? {
        let me = try await client.identity()
        let envelope = try #require(record.envelope.flatMap(Base64URL.decode))
        return switch try me.unseal(envelope, id: record.id) {
        case .version1: 1
        case .version2: 2
        }
    }

    func activeRatchets(_ client: MailslotClient, with contact: String) async throws -> [Data] {
        try await client.store.pool.read { db in
            try Data.fetchAll(db, sql: "SELECT id FROM sessions WHERE contact = ? AND active = 1", arguments: [contact])
        }
    }

    /// A relay with `alice` and `bob` signed in (keys and one-time prekeys published).
    func withAliceAndBob(_ body: (TestRelay, MailslotClient, MailslotClient) async throws -> Void) async throws {
        try await withTestRelay { relay in
            let alice = try relay.client("alice"), bob = try relay.client("bob")
            try await alice.signIn()
            try await bob.signIn()
            try await body(relay, alice, bob)
        }
    }

    @Test func clientsSendInRatchetsByDefault() async throws {
        try await withAliceAndBob { relay, alice, bob in
            #expect(try await prekeysLeft(relay, "bob") == MailslotClient.prekeySupply, "signing in uploads one-time prekeys")

            try await alice.send(text: "hello bob", to: "bob")
            try await alice.send(text: "again", to: "bob")
            #expect(try await prekeysLeft(relay, "bob") == MailslotClient.prekeySupply - 1, "one claimed for the ratchet, not one per message")
            for record in try await capture(relay, "bob") { #expect(try await version(of: record, for: bob) == 2) }

            #expect(try await bob.receive().map(\.message.payload.text) == ["hello bob", "again"])
            try await bob.send(text: "hi alice", to: "alice")
            #expect(try await alice.receive().map(\.message.payload.text) == ["hi alice"])
            #expect(try await activeRatchets(alice, with: "bob") == (try await activeRatchets(bob, with: "alice")))
            for round in 0..<3 {
                try await alice.send(text: "a\(round)", to: "bob")
                try await alice.send(text: "a\(round)'", to: "bob")
                #expect(try await bob.receive().map(\.message.payload.text) == ["a\(round)", "a\(round)'"])
                try await bob.send(text: "b\(round)", to: "alice")
                #expect(try await alice.receive().map(\.message.payload.text) == ["b\(round)"])
            }
            #expect(try await alice.rejected().isEmpty)
            #expect(try await bob.rejected().isEmpty)
            // A note to oneself still goes (as version 1: one store cannot be both ends of a ratchet).
            try await alice.send(text: "note to self", to: "alice")
            #expect(try await alice.receive().map(\.message.payload.text) == ["note to self"])
        }
    }

    @Test func theSupplyOfOneTimePrekeysIsToppedUp() async throws {
        try await withTestRelay(configure: { $0.prekeyMailboxBurst = 1000 }) { relay in
            let bob = try relay.client("bob")
            try await bob.signIn()
            let senders = MailslotClient.prekeySupply - MailslotClient.prekeyLowWater + 1
            for index in 0..<senders {
                let sender = try relay.client("s\(index)")
                try await sender.signIn()
                try await sender.send(text: "hello from \(index)", to: "bob")
            }
            #expect(try await prekeysLeft(relay, "bob") == MailslotClient.prekeyLowWater - 1)
            #expect(try await bob.receive().count == senders)
            #expect(try await prekeysLeft(relay, "bob") == MailslotClient.prekeySupply, "below the low-water mark, receiving tops it up")
            let stored = try await bob.store.pool.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM one_time_prekeys") }
            #expect(stored == MailslotClient.prekeySupply, "the secrets of used prekeys are gone")
        }
    }

    @Test func contactsWhoStartAtTheSameMomentEndOnOneRatchet() async throws {
        try await withAliceAndBob { relay, alice, bob in
            try await alice.send(text: "from alice", to: "bob")
            try await bob.send(text: "from bob", to: "alice")  // before either has received
            #expect(try await activeRatchets(alice, with: "bob") != (try await activeRatchets(bob, with: "alice")))
            #expect(try await alice.receive().map(\.message.payload.text) == ["from bob"])
            #expect(try await bob.receive().map(\.message.payload.text) == ["from alice"])
            #expect(try await activeRatchets(alice, with: "bob") == (try await activeRatchets(bob, with: "alice")))
            for round in 0..<2 {
                try await alice.send(text: "a\(round)", to: "bob")
                try await bob.send(text: "b\(round)", to: "alice")
                #expect(try await bob.receive().map(\.message.payload.text) == ["a\(round)"])
                #expect(try await alice.receive().map(\.message.payload.text) == ["b\(round)"])
            }
            #expect(try await activeRatchets(alice, with: "bob").count == 1)
            #expect(try await activeRatchets(alice, with: "bob") == (try await activeRatchets(bob, with: "alice")))
        }
    }

    @Test func aContactThatLostItsRatchetsIsSentTheMessagesAgain() async throws {
        try await withAliceAndBob { relay, alice, bob in
            try await alice.send(text: "first", to: "bob")
            #expect(try await bob.receive().count == 1)
            try await bob.send(text: "ack", to: "alice")
            #expect(try await alice.receive().count == 1)
            // Bob's device loses its ratchets (restored from an old backup, say); Alice's next
            // message is in a ratchet Bob no longer has.
            try await bob.store.pool.write { db in try db.execute(sql: "DELETE FROM sessions") }
            guard case .sent(let lost) = try await alice.send(text: "second", to: "bob") else { Issue.record("not sent"); return }
            #expect(try await bob.receive().isEmpty)
            #expect(try await bob.rejected().map(\.reason.code) == ["envelope_no_session"])
            // Bob's `unreadable` notice reaches Alice: the message is undelivered, and its resend
            // starts a new ratchet that Bob can read.
            _ = try await bob.flush()
            _ = try await alice.receive()
            #expect(try await alice.outgoing().first { $0.id == lost }?.state == .undelivered)
            let outcome = try await alice.resend(lost)
            let again = try await bob.receive().map(\.message.payload.text)
            let rejected = try await bob.rejected(), outgoing = try await alice.outgoing().map { ($0.state, $0.lastError) }
            #expect(again == ["second"], "\(outcome) \(rejected) \(outgoing)")
        }
    }

    /// The property: someone who records the envelopes on the relay and later takes the
    /// recipient's whole store (the SQLite file, every key in it) cannot open what it recorded.
    @Test func aStolenStoreDoesNotOpenCapturedEnvelopes() async throws {
        try await withAliceAndBob { relay, alice, bob in
            var captured: [MessageRecord] = []
            for round in 0..<3 {
                try await alice.send(text: "secret \(round)", to: "bob")
                try await alice.send(text: "secret \(round)'", to: "bob")
                captured += try await capture(relay, "bob")
                #expect(try await bob.receive().count == 2)
                try await bob.send(text: "ok", to: "alice")
                _ = try await alice.receive()
            }
            #expect(try await relay.pending("bob") == 0, "erased from the relay once acknowledged")

            // The theft: a copy of Bob's store, with its received messages deleted so that the
            // copy does not recognise the ids and tries to open them.
            let stolenPath = "\(relay.folder)/thief/client.sqlite"
            try FileManager.default.createDirectory(atPath: "\(relay.folder)/thief", withIntermediateDirectories: true)
            try await bob.store.pool.writeWithoutTransaction { db in try db.execute(sql: "VACUUM INTO ?", arguments: [stolenPath]) }
            let thief = try relay.client("bob", profile: "thief")
            try await thief.store.pool.write { db in try db.execute(sql: "DELETE FROM inbox") }
            let me = try await thief.identity()
            for record in captured {
                let accepted = try await thief.accept(record, as: me)
                #expect(accepted.message == nil)
            }
            let reasons = Set(try await thief.rejected().map(\.reason.code))
            #expect(reasons.isSubset(of: ["envelope_stale_message", "envelope_unknown_prekey"]) && !reasons.isEmpty, "\(reasons)")
            #expect(try await thief.history().isEmpty)

            // A captured envelope created again after its erasure: Bob recognises the id and
            // drops it; it is not shown twice.
            let replayed = try #require(captured.first)
            let created = try await relay.send(try await relay.signIn("alice").session, to: "bob", id: replayed.id,
                                               envelope: replayed.envelope.flatMap(Base64URL.decode))
            #expect(created.status == 201)
            #expect(try await bob.receive().isEmpty)
            #expect(try await relay.pending("bob") == 0)
        }
    }

    /// A bot sends to many recipients at once, several messages to each concurrently: every
    /// ratchet starts once per recipient and no message key is used twice.
    @Test func aBotSendingConcurrentlyStaysCorrect() async throws {
        try await withTestRelay { relay in
            let bot = try relay.client("bot")
            try await bot.signIn()
            let recipients = try (0..<6).map { try relay.client("user\($0)") }
            for recipient in recipients { try await recipient.signIn() }
            let perRecipient = 4
            try await withThrowingTaskGroup(of: Void.self) { group in
                for index in recipients.indices {
                    for message in 0..<perRecipient {
                        group.addTask { try await bot.send(text: "m\(message)", to: "user\(index)") }
                    }
                }
                try await group.waitForAll()
            }
            for (index, recipient) in recipients.enumerated() {
                let texts = try await recipient.receive().compactMap(\.message.payload.text)
                #expect(Set(texts) == Set((0..<perRecipient).map { "m\($0)" }), "user\(index)")
                #expect(try await recipient.rejected().isEmpty)
                #expect(try await activeRatchets(bot, with: "user\(index)").count == 1)
                // The recipient answers in the bot's ratchet: the conversation carries on.
                try await recipient.send(text: "thanks", to: "bot")
            }
            #expect(try await bot.receive().count == recipients.count)
            #expect(try await bot.rejected().isEmpty)
        }
    }

    /// After a contact's identity key changed and the user trusted the new one, the ratchets with
    /// the old key are gone and the next message starts a new ratchet with the new key.
    @Test func aTrustedNewIdentityStartsANewRatchet() async throws {
        try await withAliceAndBob { relay, alice, bob in
            try await alice.send(text: "before", to: "bob")
            #expect(try await bob.receive().count == 1)
            let old = try await activeRatchets(alice, with: "bob")
            #expect(old.count == 1)

            let newBob = try relay.client("bob", profile: "bob-2")  // a reinstall: new keys
            try await newBob.signIn()
            guard case .held(_, "bob") = try await alice.send(text: "held", to: "bob") else { Issue.record("not held"); return }
            try await alice.trust("bob", safetyNumber: try await newBob.safetyNumber(with: "alice"))  // compared: the same
            let ratchets = try await alice.store.pool.read { db in
                try Row.fetchAll(db, sql: "SELECT id, peer_identity FROM sessions WHERE contact = 'bob'")
            }
            let newKey = try await newBob.identity().signing.publicKey
            #expect(ratchets.count == 1 && (ratchets.first?["peer_identity"] as Data?) == Data(newKey.bytes))
            #expect(try await activeRatchets(alice, with: "bob") != old)
            #expect(try await newBob.receive().map(\.message.payload.text) == ["held"])
        }
    }

    /// The signed prekey rotates under an unchanged key id: a sender starting a new ratchet long
    /// after it pinned the bundle fetches it again, and does not start with an erased prekey.
    @Test func aNewRatchetUsesTheContactsCurrentSignedPrekey() async throws {
        try await withAliceAndBob { relay, alice, bob in
            try await alice.send(text: "first", to: "bob")
            #expect(try await bob.receive().count == 1)
            let pinned = try await alice.contact("bob").signedPrekey
            // A week on: bob's client replaces its signed prekey; 31 days after, it erases the old one.
            try await bob.store.pool.write { db in try db.execute(sql: "UPDATE signed_prekeys SET created_at = 0") }
            _ = try await bob.flush()
            try await bob.store.pool.write { db in try db.execute(sql: "DELETE FROM signed_prekeys WHERE retired_at IS NOT NULL") }
            // Alice's next ratchet (say bob's device said it could not read her last message).
            try await alice.store.deactivateRatchets(with: "bob", except: nil)
            try await alice.send(text: "in a new ratchet", to: "bob")
            #expect(try await alice.contact("bob").signedPrekey != pinned)
            #expect(try await bob.receive().map(\.message.payload.text) == ["in a new ratchet"])
            #expect(try await bob.rejected().isEmpty)
        }
    }

    /// Forward secrecy on the disk: once a message is stored, the ratchet state it replaced is in
    /// neither the database file nor its write-ahead log.
    @Test func replacedRatchetStatesDoNotStayOnTheDisk() async throws {
        try await withAliceAndBob { relay, alice, bob in
            func state() async throws -> Data {
                try #require(try await bob.store.pool.read { db in try Data.fetchOne(db, sql: "SELECT state FROM sessions") })
            }
            try await alice.send(text: "one", to: "bob")
            #expect(try await bob.receive().count == 1)
            let replaced = try await state()
            try await alice.send(text: "two", to: "bob")
            #expect(try await bob.receive().count == 1)
            #expect(try await state() != replaced)
            // Everything after the ratchet's id and peer key: its root and chain keys as they were.
            let secretPart = replaced.dropFirst(50)
            for suffix in ["", "-wal"] {
                let file = (try? Data(contentsOf: URL(fileURLWithPath: "\(relay.folder)/bob/client.sqlite\(suffix)"))) ?? Data()
                #expect(file.range(of: secretPart) == nil, "the replaced state is in client.sqlite\(suffix)")
            }
        }
    }

    /// A contact pinned while it published a version 1 bundle moves to ratchets under the same keys
    /// (no `stale_keys` says so): the sender learns it on its next send.
    @Test func aContactThatStartsPublishingPrekeysGetsRatchets() async throws {
        try await withAliceAndBob { relay, alice, bob in
            let keys = try await bob.identity()
            let legacy = KeyBundle(uid: "bob", identity: keys.signing, mailboxKey: keys.mailbox.publicKey)
            let bobSession = try await relay.signIn("bob").session
            #expect(try await relay.call("PUT", "/v1/users/bob/keys", session: bobSession, body: try JSONSerialization.jsonObject(with: Data(legacy.encoded()))).status == 204)
            #expect(try await alice.contact("bob").signedPrekey == nil, "pinned from the version 1 bundle")
            try await bob.signIn()  // publishes version 2 again, same keys
            let restarted = try relay.client("alice")  // a new run of alice's client, same store
            try await restarted.send(text: "now in a ratchet", to: "bob")
            for record in try await capture(relay, "bob") { #expect(try await version(of: record, for: bob) == 2) }
            #expect(try await bob.receive().map(\.message.payload.text) == ["now in a ratchet"])
        }
    }

    @Test func versionOneEnvelopesOpenUntilTheContactUsesRatchets() async throws {
        try await withAliceAndBob { relay, alice, bob in
            // A version 1 envelope from an older client of Alice's opens.
            let me = try await alice.identity()
            let bobKeys = try await alice.contact("bob")
            let aliceSession = try await relay.signIn("alice").session
            func legacy(_ text: String) async throws {
                let id = MessageID.generate()
                let envelope = try Envelope.seal(ChatMessage(type: .text, sender: Sender(id: "alice"), payload: Payload(text: text), timestamp: 1),
                                                 id: id, from: "alice", identity: me.signing, to: "bob", mailboxKey: bobKeys.mailboxKey)
                #expect(try await relay.send(aliceSession, to: "bob", id: id, envelope: envelope).status == 201)
            }
            try await legacy("old client")
            let old = try await bob.receive().map(\.message.payload.text)
            let oldRejected = try await bob.rejected()
            #expect(old == ["old client"], "\(oldRejected)")
            // After a ratchet message from Alice, a version 1 envelope is a downgrade.
            try await alice.send(text: "new client", to: "bob")
            #expect(try await bob.receive().map(\.message.payload.text) == ["new client"])
            try await legacy("downgraded")
            #expect(try await bob.receive().isEmpty)
            #expect(try await bob.rejected().map(\.reason) == [.downgrade])
        }
    }
}
