import Foundation
import GRDB
import MailslotWire
import Testing
@testable import MailslotRelay

/// Migration `v4` turns envelopes stored as bytes into the base64url text the relay now keeps:
/// each message reads back as the text its sender sent, and no byte form is left behind.
@Suite struct EnvelopeTextMigrationTests {
    @Test func envelopesStoredAsBytesReadBackAsTheirText() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("envelopetext-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let path = folder.appendingPathComponent("relay.sqlite").path
        // More than one batch of the migration, and sizes whose text ends in 0, 1 and 2 spare characters.
        let envelopes = (0..<2_500).map { n in randomBytes([256, 512, 1024][n % 3] + n % 3) }
        do {
            let queue = try DatabaseQueue(path: path)
            try Schema.migrator.migrate(queue, upTo: "v3: mailbox sizes kept by triggers")
            try await queue.write { db in
                for (n, envelope) in envelopes.enumerated() {
                    try db.execute(sql: """
                        INSERT INTO messages (recipient, id, author, created_at, expires_at, size, envelope) VALUES ('bob', ?, 'alice', 1000, 100000, ?, ?)
                        """, arguments: ["m\(n)", envelope.count, Data(envelope)])
                }
            }
        }
        let store = try SQLiteStore(path: path)
        let blobs = try await store.read("test") { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM messages WHERE typeof(envelope) <> 'text'") }
        #expect(blobs == 0)
        for n in [0, 1, 2, 999, 1_000, 1_001, 2_499] {
            let message = try #require(try await store.message(recipient: "bob", id: "m\(n)", now: 2_000))
            #expect(message.envelope == Base64URL.encode(envelopes[n]))
            #expect(message.size == envelopes[n].count)
            #expect(message.record(forOwner: true).envelope.flatMap(Base64URL.decode) == envelopes[n])
        }
    }
}
