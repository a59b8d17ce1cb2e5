import Foundation
import GRDB
@testable import MailslotClient
import MailslotTestSupport
import MailslotWire
import Testing

/// Who may be sent an `unreadable` notice (spec/envelope.md §4.2 item 4): a contact, or the
/// author of a message the relay stored before this device's keys existed; never a stranger; and
/// within the bounds per author and in all. The lying-relay tests (SecurityTests) show the rule
/// end to end; these check the rule's edges on the store.
@Suite struct NoticeRuleTests {
    /// Bob, signed in, who has received one message from alice (a contact).
    func withBob(_ body: (TestRelay, MailslotClient) async throws -> Void) async throws {
        try await withTestRelay { relay in
            let alice = try relay.client("alice"), bob = try relay.client("bob")
            try await alice.signIn()
            try await bob.signIn()
            try await alice.send(text: "hello", to: "bob")
            #expect(try await bob.receive().count == 1)
            try await body(relay, bob)
        }
    }

    let now = Date().timeIntervalSince1970
    /// A relay time after bob's keys were made (the suite's `now` is from before).
    var createdNow: String { Timestamp.format(Int64(Date().timeIntervalSince1970) + 1) }

    /// Stores `count` notices to `author`, sent, made at `at`.
    func addNotices(_ bob: MailslotClient, to author: String, count: Int, at: Double) async throws {
        try await bob.store.pool.write { db in
            for _ in 0..<count {
                let notice = MessageID.generate(), rejected = MessageID.generate()
                try db.execute(sql: "INSERT INTO sent (id, recipient, type, body, state, created_at) VALUES (?, ?, 'receipt', x'', 'sent', ?)",
                               arguments: [notice, author, at])
                try db.execute(sql: "INSERT INTO rejected (id, author, reason, received_at, notice_id) VALUES (?, ?, 'envelope_cannot_decrypt', ?, ?)",
                               arguments: [rejected, author, at, notice])
            }
        }
    }

    @Test func aContactMayBeToldAStrangerNot() async throws {
        try await withBob { _, bob in
            #expect(try await bob.store.mayNotify("alice", createdAt: createdNow))
            #expect(try await !bob.store.mayNotify("mallory", createdAt: createdNow))
            // A notice bob once sent mallory does not make her a contact.
            try await addNotices(bob, to: "mallory", count: 1, at: now)
            #expect(try await !bob.store.mayNotify("mallory", createdAt: createdNow))
        }
    }

    @Test func aMessageStoredBeforeThisDevicesKeysMayBeAnswered() async throws {
        try await withBob { _, bob in
            let made = try #require(try await bob.store.pool.read { db in try Double.fetchOne(db, sql: "SELECT created_at FROM identity") })
            #expect(try await bob.store.mayNotify("carol", createdAt: Timestamp.format(Int64(made) - 60)), "sealed to a previous install's keys")
            #expect(try await !bob.store.mayNotify("carol", createdAt: Timestamp.format(Int64(made) + 60)))
            // A store from before the column has no such exception.
            try await bob.store.pool.write { db in try db.execute(sql: "UPDATE identity SET created_at = NULL") }
            #expect(try await !bob.store.mayNotify("carol", createdAt: Timestamp.format(Int64(made) - 60)))
        }
    }

    @Test func noticesAreBoundedPerAuthorADayAndInAll() async throws {
        try await withBob { _, bob in
            try await addNotices(bob, to: "alice", count: ClientStore.maxNoticesPerAuthor - 1, at: now - 60)
            #expect(try await bob.store.mayNotify("alice", createdAt: createdNow))
            try await addNotices(bob, to: "alice", count: 1, at: now - 60)
            #expect(try await !bob.store.mayNotify("alice", createdAt: createdNow), "the author's daily bound")
            #expect(try await bob.store.mayNotify("alice", createdAt: createdNow, now: now + ClientStore.noticeWindow), "a day later")

            // Carol (whose message predates bob's keys) has had none, but all notices together are bounded.
            let made = try #require(try await bob.store.pool.read { db in try Double.fetchOne(db, sql: "SELECT created_at FROM identity") })
            let beforeKeys = Timestamp.format(Int64(made) - 60)
            try await addNotices(bob, to: "dave", count: ClientStore.maxNotices - ClientStore.maxNoticesPerAuthor - 1, at: now - 60)
            #expect(try await bob.store.mayNotify("carol", createdAt: beforeKeys))
            try await addNotices(bob, to: "dave", count: 1, at: now - 60)
            #expect(try await !bob.store.mayNotify("carol", createdAt: beforeKeys), "the bound in all")
        }
    }
}
