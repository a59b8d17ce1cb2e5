import Foundation
import MailslotTestSupport
import Testing
@testable import MailslotRelay
import MailslotWire

/// Erasure is real (the ciphertext is gone from the database files), and stored state survives
/// a restart.
@Suite struct DurabilityTests {
    /// Whether the bytes `range` of `envelope` occur anywhere in the relay's database files (main
    /// file and WAL), as bytes or as the base64url text the relay stores (`v4`).
    func databaseFilesContain(_ envelope: [UInt8], _ range: Range<Int>, in folder: String) throws -> Bool {
        // The whole base64 groups inside `range`: 3 bytes to 4 characters.
        let text = Array(Base64URL.encode(envelope).utf8)
        let groups = (range.lowerBound + 2) / 3 ..< range.upperBound / 3
        let needles = [Data(envelope[range]), Data(text[groups.lowerBound * 4 ..< groups.upperBound * 4])]
        for name in ["relay.sqlite", "relay.sqlite-wal"] {
            let path = (folder as NSString).appendingPathComponent(name)
            guard let bytes = FileManager.default.contents(atPath: path) else { continue }
            if needles.contains(where: { bytes.range(of: $0) != nil }) { return true }
        }
        return false
    }

    @Test func anAcknowledgedEnvelopeIsGoneFromTheDatabaseFiles() async throws {
        try await withTestRelay { relay in
            let alice = try await relay.signIn("alice").session
            let bob = try await relay.signIn("bob").session
            let envelopes = (1...3).map { _ in randomBytes(4096) }
            for (n, envelope) in envelopes.enumerated() { try await relay.send(alice, to: "bob", id: messageID(n), envelope: envelope) }

            // The search does find stored ciphertext (so that it can fail). Bytes 300..<364 are in
            // the row's own page: a 4 KiB envelope's text also fills overflow pages, and a piece that
            // straddles two pages is not found.
            for envelope in envelopes { #expect(try databaseFilesContain(envelope, 300..<364, in: relay.dataDirectory)) }

            #expect(try await relay.call("DELETE", "/v1/users/bob/messages/\(messageID(0))", session: bob).status == 204)
            #expect(try await relay.call("DELETE", "/v1/users/bob/messages/\(messageID(1))", session: alice).status == 204, "unsend")
            try await eventually("acked and unsent ciphertext is overwritten in the main file and the WAL is truncated") {
                try !databaseFilesContain(envelopes[0], 300..<364, in: relay.dataDirectory)
                    && !databaseFilesContain(envelopes[1], 300..<364, in: relay.dataDirectory)
            }
            for envelope in envelopes.prefix(2) {
                for offset in stride(from: 0, to: 4096 - 32, by: 512) {
                    #expect(try !databaseFilesContain(envelope, offset..<offset + 32, in: relay.dataDirectory), "no 32-byte piece remains")
                }
            }
            #expect(try databaseFilesContain(envelopes[2], 300..<364, in: relay.dataDirectory), "the unacked one is still there")
        }
    }

    @Test func anExpiredEnvelopeIsGoneFromTheDatabaseFiles() async throws {
        let clock = TestClock()
        try await withTestRelay(configure: { $0.sweepInterval = 0.1; $0.clock = clock.relayClock }) { relay in
            let alice = try await relay.signIn("alice").session
            let envelope = randomBytes(2048)
            try await relay.send(alice, to: "bob", id: messageID(1), envelope: envelope, ttl: 1)
            #expect(try databaseFilesContain(envelope, 500..<564, in: relay.dataDirectory))
            clock.advance(by: .seconds(1))
            try await eventually("the expired envelope is erased from the database files") {
                try !databaseFilesContain(envelope, 500..<564, in: relay.dataDirectory)
            }
        }
    }

    @Test func messagesSessionsAndKeysSurviveARestart() async throws {
        let issuer = IdentityKeyPair()
        try await withTestRelay(issuer: issuer) { first in
            let alice = try await first.signIn("alice").session
            let (bob, bobRefresh) = try await first.signIn("bob")
            let envelope = randomBytes(512)
            try await first.send(alice, to: "bob", id: messageID(1), envelope: envelope)
            let bundle = KeyBundle(uid: "bob", identity: IdentityKeyPair(), mailboxKey: MailboxKeyPair().publicKey)
            #expect(try await first.call("PUT", "/v1/users/bob/keys", session: bob, body: Data(bundle.encoded())).status == 204)
            try await first.stop()

            try await withTestRelay(issuer: issuer, dataDirectory: first.dataDirectory) { second in
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
    }
}
