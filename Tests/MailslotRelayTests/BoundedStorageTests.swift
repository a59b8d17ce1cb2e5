import Foundation
import MailslotAudit
import MailslotTestSupport
import Testing
@testable import MailslotRelay
import MailslotWire

/// What one account can make the relay store: bytes per author across mailboxes, sign-ins per
/// uid, block-list entries; and what one read can make it hold.
@Suite struct BoundedStorageTests {
    @Test func anAuthorsWaitingBytesAreBoundedAcrossMailboxesAndFreedByAcks() async throws {
        try await withTestRelay(configure: { $0.maxEnvelopeBytes = 512; $0.maxAuthorBytes = 3 * 512 }) { relay in
            let alice = try await relay.signIn("alice"), bob = try await relay.signIn("bob")
            for (n, recipient) in ["bob", "carol", "dave"].enumerated() {
                #expect(try await relay.send(alice.session, to: recipient, id: messageID(n)).status == 201)
            }
            let refused = try await relay.send(alice.session, to: "erin", id: messageID(9))
            #expect(refused.status == 429 && refused.problem == .authorQuota)
            #expect(Int(refused.headers["retry-after"] ?? "") ?? 0 >= 1)
            #expect(try await relay.send(bob.session, to: "erin", id: messageID(8)).status == 201, "another author's quota is his own")
            // bob acknowledges alice's message: her bytes are free again.
            #expect(try await relay.call("DELETE", "/v1/users/bob/messages/\(messageID(0))", session: bob.session).status == 204)
            #expect(try await relay.send(alice.session, to: "erin", id: messageID(9)).status == 201)
        }
    }

    @Test func signInsOfOneUidAreCappedAndTheLeastRecentlyRefreshedIsRevoked() async throws {
        try await withTestRelay(configure: { $0.maxSessionFamilies = 3 }) { relay in
            let first = try await relay.signIn("alice")
            let second = try await relay.signIn("alice")
            // The first refreshes: now the second is the least recently refreshed.
            let refreshed = try await relay.call("POST", "/v1/sessions/refresh", body: ["refresh": first.refresh])
            #expect(refreshed.status == 201)
            let firstSession = refreshed.json["session"] as? String ?? ""
            _ = try await relay.signIn("alice")
            _ = try await relay.signIn("alice")
            #expect(try await relay.call("GET", "/v1/users/alice/blocked", session: second.session).status == 401, "evicted")
            let stale = try await relay.call("POST", "/v1/sessions/refresh", body: ["refresh": second.refresh])
            #expect(stale.status == 401 && stale.problem == .refreshInvalid)
            #expect(try await relay.call("GET", "/v1/users/alice/blocked", session: firstSession).status == 200, "kept")
            _ = try await relay.signIn("bob")  // another uid's sign-ins are not alice's
            let rows = try await relay.sqlite.read("test") { db in
                try Int.fetchOne(db, sql: "SELECT count(DISTINCT family) FROM sessions WHERE uid = 'alice'") ?? 0
            }
            #expect(rows == 3)
        }
    }

    @Test func refreshingInALoopKeepsOnlyTheLatestSpentTokens() async throws {
        try await withTestRelay { relay in
            var refresh = try await relay.signIn("alice").refresh
            var spent: [String] = []
            for _ in 0..<20 {
                let answer = try await relay.call("POST", "/v1/sessions/refresh", body: ["refresh": refresh])
                spent.append(refresh)
                refresh = answer.json["refresh"] as? String ?? ""
            }
            let rows = try await relay.sqlite.read("test") { db in
                try Int.fetchOne(db, sql: "SELECT count(*) FROM sessions WHERE uid = 'alice' AND spent = 1") ?? 0
            }
            #expect(rows == SQLiteStore.spentRefreshTokensKept)
            let forgotten = try await relay.call("POST", "/v1/sessions/refresh", body: ["refresh": spent[0]])
            #expect(forgotten.problem == .refreshInvalid, "spent before the latest 16: unknown")
            let reused = try await relay.call("POST", "/v1/sessions/refresh", body: ["refresh": spent[19]])
            #expect(reused.problem == .refreshReused, "among the latest 16: its reuse revokes the family")
            #expect(try await relay.call("POST", "/v1/sessions/refresh", body: ["refresh": refresh]).status == 401)
        }
    }

    @Test func theBlockListIsPagedAndCapped() async throws {
        try await withTestRelay(configure: { $0.maxBlockedPerOwner = 5 }) { relay in
            let bob = try await relay.signIn("bob")
            for n in 0..<5 {
                #expect(try await relay.call("PUT", "/v1/users/bob/blocked/spammer\(n)", session: bob.session).status == 204)
            }
            let full = try await relay.call("PUT", "/v1/users/bob/blocked/spammer5", session: bob.session)
            #expect(full.status == 409 && full.problem == .blockListFull)
            #expect(try await relay.call("PUT", "/v1/users/bob/blocked/spammer4", session: bob.session).status == 204, "again: fine")
            var authors: [String] = []
            var after: String?
            for _ in 0..<5 {
                let page = try await relay.call("GET", "/v1/users/bob/blocked?limit=2" + (after.map { "&after=\($0)" } ?? ""), session: bob.session)
                authors += page.json["blocked"] as? [String] ?? []
                after = page.json["next"] as? String
                if after == nil { break }
            }
            #expect(authors == (0..<5).map { "spammer\($0)" })
            #expect(try await relay.call("GET", "/v1/users/bob/blocked?limit=0", session: bob.session).status == 400)
            #expect(try await relay.call("GET", "/v1/users/bob/blocked?after=..", session: bob.session).problem == .invalidUID)
        }
    }

    @Test func aPageStopsAtItsByteBoundAndGivesNext() async throws {
        try await withTestRelay(configure: { $0.maxPageBytes = 3 * 700; $0.createBurst = 1000; $0.createRate = 1000 }) { relay in
            let alice = try await relay.signIn("alice"), bob = try await relay.signIn("bob")
            for n in 0..<7 { try await relay.send(alice.session, to: "bob", id: messageID(n)) }  // 683 bytes of text each
            var pages: [Int] = []
            var after: String?
            repeat {
                let page = try await relay.call("GET", "/v1/users/bob/messages?limit=100" + (after.map { "&after=\($0)" } ?? ""), session: bob.session)
                pages.append((page.json["messages"] as? [Any])?.count ?? -1)
                after = page.json["next"] as? String
            } while after != nil && pages.count < 10
            #expect(pages == [3, 3, 1])
        }
    }

    /// An owner who asks for pages and never reads them: each held page counts against the
    /// mailbox's reads, so the relay holds a few pages, not one per request.
    @Test func unreadPagesAreBoundedPerMailbox() async throws {
        try await withTestRelay(configure: { configuration in
            configuration.maxEnvelopeBytes = 256 * 1024
            configuration.maxPageBytes = 16 * 1024 * 1024
            configuration.createBurst = 1000
            configuration.createRate = 1000
        }) { relay in
            let alice = try await relay.signIn("alice"), bob = try await relay.signIn("bob")
            // 16 MiB of text waiting: far more than the kernel takes of one answer into its socket buffers
            // (the relay's send buffer is at most 4 MiB here; the reader's is fixed at 64 KiB).
            try await withThrowingTaskGroup(of: Void.self) { group in
                for n in 0..<48 { group.addTask { try await relay.send(alice.session, to: "bob", id: messageID(n), envelope: randomBytes(256 * 1024)) } }
                try await group.waitForAll()
            }
            let before = residentBytes()
            var held: [RawConnection] = []
            for _ in 0..<24 {
                let connection = try RawConnection(port: relay.port, receiveBuffer: 64 * 1024)
                connection.send("GET /v1/users/bob/messages?limit=500 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(bob.session)\r\n\r\n")
                held.append(connection)
            }
            var statuses: [Int] = []
            for connection in held { statuses.append(await connection.status(attempts: 20) ?? -1) }
            // Four pages held (64 MiB) and what encoding them left to malloc; one per request would be 384 MiB and more.
            let grown = residentBytes() - before
            // Four are held; a page the kernel's socket buffers took whole ends its read, and one more may start.
            #expect(relay.relay.mailboxes.readLimiter.count("bob") <= 4)
            #expect(statuses.filter { $0 == 200 }.count >= 4, "\(statuses)")
            #expect(statuses.filter { $0 == 429 }.count >= 16, "\(statuses)")
            #expect(statuses.allSatisfy { $0 == 200 || $0 == 429 }, "\(statuses)")
            #expect(grown < 300 * 1024 * 1024, "relay memory grew by \(grown / 1024 / 1024) MiB for 24 unread pages of 16 MiB")
            held.removeAll()
            // Once the held answers are dropped, their reads end.
            try await eventually("the dropped answers' reads end") { relay.relay.mailboxes.readLimiter.count("bob") == 0 }
        }
    }

    /// Accounts that ask for pages and never read them hold at most half of the relay's reads
    /// (`--max-reads`, spec/protocol.md §5.6): another owner's read still starts, and the relay's
    /// bound holds whatever the accounts do.
    @Test func unreadPagesOfSomeAccountsLeaveOthersTheirReads() async throws {
        try await withTestRelay(configure: { configuration in
            configuration.maxEnvelopeBytes = 256 * 1024
            configuration.maxPageBytes = 16 * 1024 * 1024
            configuration.maxReads = 8
        }) { relay in
            let heavy = [(uid: "heavy1", session: try await relay.signIn("heavy1").session),
                         (uid: "heavy2", session: try await relay.signIn("heavy2").session)]
            let bystander = try await relay.signIn("bystander")
            // Stored directly: 12 MiB of text waiting in each heavy mailbox, one message in the bystander's.
            let envelope = Base64URL.encode(randomBytes(256 * 1024))
            for (uid, count) in [("heavy1", 48), ("heavy2", 48), ("bystander", 1)] {
                for n in 0..<count {
                    _ = try await relay.relay.store.createMessage(recipient: uid, id: messageID(n), author: "alice", envelope: envelope,
                                                                  size: 256 * 1024, keyID: nil, now: EpochMilliseconds.now(), expiresAt: EpochMilliseconds.now() + 600_000,
                                                                  limits: CreateLimits(maxPending: 100, maxAuthorBytes: 1 << 40)).value
                }
            }
            var held: [RawConnection] = []
            var statuses: [String: [Int]] = [:]
            for user in heavy {
                for _ in 0..<4 {
                    let connection = try RawConnection(port: relay.port, receiveBuffer: 16 * 1024)
                    connection.send("GET /v1/users/\(user.uid)/messages?limit=500 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(user.session)\r\n\r\n")
                    statuses[user.uid, default: []].append(await connection.status(attempts: 100) ?? -1)
                    held.append(connection)
                }
            }
            let limiter = relay.relay.mailboxes.readLimiter
            let all = statuses.values.flatMap { $0 }
            #expect(all.allSatisfy { $0 == 200 || $0 == 429 }, "\(statuses)")
            // Half of the relay's 8, and the other mailbox's first read; the rest refused.
            #expect(limiter.total <= 4 + 1 && all.filter { $0 == 200 }.count <= 5 && all.filter { $0 == 429 }.count >= 3, "\(statuses)")
            let page = try await relay.call("GET", "/v1/users/bystander/messages", session: bystander.session)
            #expect(page.status == 200 && (page.json["messages"] as? [Any])?.count == 1, "the bystander reads: \(page.summary)")
            let refused = try await relay.call("GET", "/v1/users/heavy2/messages?limit=1", session: heavy[1].session)
            #expect(refused.status == 429 && refused.problem == .tooManyReads && refused.headers["retry-after"] == "1", "\(refused.summary)")
            held.removeAll()
        }
    }

    /// A client that stops reading its answer is disconnected after the idle timeout: it does
    /// not keep the page, the read or the connection for as long as it likes.
    @Test func aReaderThatStopsReadingIsDisconnectedAfterTheIdleTimeout() async throws {
        try await withTestRelay(configure: { configuration in
            configuration.idleTimeout = 1
            configuration.maxEnvelopeBytes = 256 * 1024
            configuration.maxPageBytes = 16 * 1024 * 1024
            configuration.createBurst = 1000
            configuration.createRate = 1000
        }) { relay in
            let bob = try await relay.signIn("bob")
            // Stored directly: HTTP clients that keep connections alive race a 1 s idle timeout.
            let envelope = Base64URL.encode(randomBytes(256 * 1024))
            for n in 0..<48 {
                _ = try await relay.relay.store.createMessage(recipient: "bob", id: messageID(n), author: "alice", envelope: envelope,
                                                              size: 256 * 1024, keyID: nil, now: EpochMilliseconds.now(), expiresAt: EpochMilliseconds.now() + 600_000,
                                                              limits: CreateLimits(maxPending: 100, maxAuthorBytes: 1 << 40)).value
            }
            // A 16 MiB page for a reader whose socket takes 16 KiB: without a deadline its read,
            // its page and its connection would stay as long as the reader likes.
            let stalled = try RawConnection(port: relay.port, receiveBuffer: 16 * 1024)
            stalled.send("GET /v1/users/bob/messages?limit=500 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(bob.session)\r\n\r\n")
            try await eventually("the stalled read starts") { relay.relay.mailboxes.readLimiter.count("bob") == 1 }
            try await eventually("disconnected about a second after the socket stopped taking the answer") {
                relay.relay.mailboxes.readLimiter.count("bob") == 0
            }
            _ = stalled
        }
    }
}

/// This process's resident memory, in bytes.
func residentBytes() -> Int {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
          let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
          let kib = Int(line.split(separator: " ").dropFirst().first ?? "") else { return 0 }
    return kib * 1024
}
