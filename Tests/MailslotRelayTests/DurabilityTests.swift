import Foundation
import Testing
@testable import MailslotRelay
import MailslotWire

/// Erasure is real (the ciphertext is gone from the database files), and stored state survives
/// a restart.
@Suite struct DurabilityTests {
    /// Whether `needle` occurs anywhere in the relay's database files (main file and WAL).
    func databaseFilesContain(_ needle: [UInt8], in folder: String) throws -> Bool {
        for name in ["relay.sqlite", "relay.sqlite-wal"] {
            let path = (folder as NSString).appendingPathComponent(name)
            guard let bytes = FileManager.default.contents(atPath: path) else { continue }
            if bytes.range(of: Data(needle)) != nil { return true }
        }
        return false
    }

    func waitUntil(_ condition: () throws -> Bool) async throws -> Bool {
        for _ in 0..<100 {
            if try condition() { return true }
            try await Task.sleep(for: .milliseconds(20))
        }
        return false
    }

    @Test func anAcknowledgedEnvelopeIsGoneFromTheDatabaseFiles() async throws {
        let relay = try await TestRelay.start()
        defer { Task { try? await relay.finish() } }
        let alice = try await relay.signIn("alice").session
        let bob = try await relay.signIn("bob").session
        let envelopes = (1...3).map { _ in randomBytes(4096) }
        for (n, envelope) in envelopes.enumerated() { try await relay.send(alice, to: "bob", id: messageID(n), envelope: envelope) }

        // The search does find stored ciphertext (so that it can fail).
        for envelope in envelopes { #expect(try databaseFilesContain(Array(envelope[1000..<1064]), in: relay.dataDirectory)) }

        #expect(try await relay.call("DELETE", "/v1/users/bob/messages/\(messageID(0))", session: bob).status == 204)
        #expect(try await relay.call("DELETE", "/v1/users/bob/messages/\(messageID(1))", session: alice).status == 204, "unsend")
        let erased = try await waitUntil {
            try !databaseFilesContain(Array(envelopes[0][1000..<1064]), in: relay.dataDirectory)
                && !databaseFilesContain(Array(envelopes[1][1000..<1064]), in: relay.dataDirectory)
        }
        #expect(erased, "acked and unsent ciphertext is overwritten in the main file and the WAL is truncated")
        for envelope in envelopes.prefix(2) {
            for offset in stride(from: 0, to: 4096 - 32, by: 512) {
                #expect(try !databaseFilesContain(Array(envelope[offset..<offset + 32]), in: relay.dataDirectory), "no 32-byte piece remains")
            }
        }
        #expect(try databaseFilesContain(Array(envelopes[2][1000..<1064]), in: relay.dataDirectory), "the unacked one is still there")
    }

    @Test func anExpiredEnvelopeIsGoneFromTheDatabaseFiles() async throws {
        let relay = try await TestRelay.start { $0.sweepInterval = 0.1 }
        defer { Task { try? await relay.finish() } }
        let alice = try await relay.signIn("alice").session
        let envelope = randomBytes(2048)
        try await relay.send(alice, to: "bob", id: messageID(1), envelope: envelope, ttl: 1)
        #expect(try databaseFilesContain(Array(envelope[500..<564]), in: relay.dataDirectory))
        try await Task.sleep(for: .seconds(1))
        #expect(try await waitUntil { try !databaseFilesContain(Array(envelope[500..<564]), in: relay.dataDirectory) })
    }

    @Test func messagesSessionsAndKeysSurviveARestart() async throws {
        let issuer = IdentityKeyPair()
        let first = try await TestRelay.start(issuer: issuer)
        let alice = try await first.signIn("alice").session
        let (bob, bobRefresh) = try await first.signIn("bob")
        let envelope = randomBytes(512)
        try await first.send(alice, to: "bob", id: messageID(1), envelope: envelope)
        let bundle = KeyBundle(uid: "bob", identity: IdentityKeyPair(), mailboxKey: MailboxKeyPair().publicKey)
        #expect(try await first.call("PUT", "/v1/users/bob/keys", session: bob, body: Data(bundle.encoded())).status == 204)
        try await first.stop()

        let second = try await TestRelay.start(issuer: issuer, dataDirectory: first.dataDirectory)
        defer { Task { try? await second.finish() } }
        let stored = try await second.call("GET", "/v1/users/bob/messages/\(messageID(1))", session: bob)
        #expect(stored.status == 200, "the session survived too")
        #expect(stored.json["envelope"] as? String == Base64URL.encode(envelope))
        #expect(try KeyBundle.decode(Array(try await second.call("GET", "/v1/users/bob/keys", session: alice).body)) == bundle)
        #expect(try await second.call("POST", "/v1/sessions/refresh", body: ["refresh": bobRefresh]).status == 201)
        // The sequence goes on: a new message is listed after the old one.
        try await second.send(alice, to: "bob", id: messageID(2))
        let list = try await second.call("GET", "/v1/users/bob/messages", session: try await second.signIn("bob").session)
        #expect((list.json["messages"] as? [[String: Any]])?.compactMap { $0["id"] as? String } == [messageID(1), messageID(2)])
    }
}
