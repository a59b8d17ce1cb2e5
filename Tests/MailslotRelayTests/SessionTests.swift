import Foundation
import GRDB
import MailslotTestSupport
import Testing
@testable import MailslotRelay
import MailslotWire

/// Sign-in with custom tokens, refresh rotation and reuse, sign-out, expiry.
@Suite struct SessionTests {
    @Test func signInRefreshAndSignOut() async throws {
        try await withTestRelay { relay in
            let first = try await relay.call("POST", "/v1/sessions", body: ["token": try relay.token("alice")])
            #expect(first.status == 201)
            #expect(first.json["uid"] as? String == "alice")
            let session = try #require(first.json["session"] as? String)
            let refresh = try #require(first.json["refresh"] as? String)
            #expect(session.hasPrefix("mss_") && refresh.hasPrefix("msr_"))
            #expect(Timestamp.parse(first.json["expires_at"] as? String ?? "") != nil)
            #expect(try await relay.call("GET", "/v1/users/alice/messages", session: session).status == 200)

            // Refresh rotates: a new pair, the old session ends.
            let second = try await relay.call("POST", "/v1/sessions/refresh", body: ["refresh": refresh])
            #expect(second.status == 201)
            let newSession = try #require(second.json["session"] as? String)
            let newRefresh = try #require(second.json["refresh"] as? String)
            #expect(second.json["uid"] as? String == "alice")
            #expect(newSession != session && newRefresh != refresh)
            #expect(try await relay.call("GET", "/v1/users/alice/messages", session: session).status == 401)
            #expect(try await relay.call("GET", "/v1/users/alice/messages", session: newSession).status == 200)

            // Sign-out revokes the family: the session and its refresh token.
            #expect(try await relay.call("DELETE", "/v1/sessions/current", session: newSession).status == 204)
            #expect(try await relay.call("GET", "/v1/users/alice/messages", session: newSession).status == 401)
            let afterSignOut = try await relay.call("POST", "/v1/sessions/refresh", body: ["refresh": newRefresh])
            #expect(afterSignOut.status == 401)
            #expect(afterSignOut.problem == .refreshInvalid)
        }
    }

    @Test func reusingASpentRefreshTokenRevokesTheWholeFamily() async throws {
        try await withTestRelay { relay in
            let (_, stolen) = try await relay.signIn("alice")
            let legit = try await relay.call("POST", "/v1/sessions/refresh", body: ["refresh": stolen])
            let legitSession = try #require(legit.json["session"] as? String)
            let legitRefresh = try #require(legit.json["refresh"] as? String)
            let otherSignIn = try await relay.signIn("alice").session

            let replay = try await relay.call("POST", "/v1/sessions/refresh", body: ["refresh": stolen])
            #expect(replay.status == 401)
            #expect(replay.problem == .refreshReused)
            #expect(try await relay.call("GET", "/v1/users/alice/messages", session: legitSession).status == 401, "the family is revoked")
            #expect(try await relay.call("POST", "/v1/sessions/refresh", body: ["refresh": legitRefresh]).status == 401)
            #expect(try await relay.call("GET", "/v1/users/alice/messages", session: otherSignIn).status == 200, "other sign-ins are untouched")
        }
    }

    @Test func everyTokenRejectionIsA401WithItsReason() async throws {
        try await withTestRelay { relay in
            let stranger = IdentityKeyPair()
            let now = Date()
            let cases: [(String, String)] = [
                (try TokenIssuer(key: stranger, audience: "test.relay").mint(uid: "alice"), "token_unknown_key"),
                (try TokenIssuer(key: relay.issuer, audience: "other.relay").mint(uid: "alice"), "token_wrong_audience"),
                (try TokenIssuer(key: relay.issuer, audience: "test.relay").mint(uid: "alice", lifetime: 60, now: now.addingTimeInterval(-120)), "token_expired"),
                (try TokenIssuer(key: relay.issuer, audience: "test.relay").mint(uid: "alice", now: now.addingTimeInterval(600)), "token_issued_in_future"),
                (try tampered(relay.token("alice")), "token_bad_signature"),
                ("v4.local.AAAA", "token_wrong_purpose"),
                ("v2.public.AAAA", "token_unsupported_version"),
                ("garbage", "token_malformed"),
                (String(repeating: "A", count: 5000), "token_oversized"),
            ]
            for (token, reason) in cases {
                let answer = try await relay.call("POST", "/v1/sessions", body: ["token": token])
                #expect(answer.status == 401, "\(reason)")
                #expect(answer.problem == .invalidToken, "\(reason)")
                #expect((answer.json["detail"] as? String)?.contains(reason) == true, "\(reason): \(answer.json)")
                #expect(!String(decoding: answer.body, as: UTF8.self).contains(token.prefix(40)), "the answer never echoes the token")
            }
            #expect(try await relay.call("POST", "/v1/sessions", body: ["tok": "x"]).problem == .invalidJSON)
            #expect(try await relay.call("POST", "/v1/sessions/refresh", body: ["refresh": "msr_nope"]).problem == .refreshInvalid)
        }
    }

    /// The token with one payload character changed (still valid base64url).
    func tampered(_ token: String) throws -> String {
        var parts = token.split(separator: ".").map(String.init)
        var payload = try #require(Base64URL.decode(parts[2]))
        payload[5] ^= 0x01
        parts[2] = Base64URL.encode(payload)
        return parts.joined(separator: ".")
    }

    @Test func expiredSessionsAreRefused() async throws {
        let clock = TestClock()
        try await withTestRelay(configure: { $0.sessionLifetime = 10; $0.clock = clock.relayClock }) { relay in
            let (session, refresh) = try await relay.signIn("alice")
            #expect(try await relay.call("GET", "/v1/users/alice/messages", session: session).status == 200)
            clock.advance(by: .seconds(5))
            #expect(try await relay.call("GET", "/v1/users/alice/messages", session: session).status == 200, "not yet")
            clock.advance(by: .seconds(5))
            let expired = try await relay.call("GET", "/v1/users/alice/messages", session: session)
            #expect(expired.status == 401)
            #expect(expired.problem == .sessionExpired)
            #expect(try await relay.call("POST", "/v1/sessions/refresh", body: ["refresh": refresh]).status == 201, "refresh still works")
        }
    }

    @Test(arguments: ["Bearer", "Basic abc", "Bearer mss_short", "bearer  ", "Bearer msr_" + String(repeating: "A", count: 43)])
    func malformedAuthorizationIsUnauthenticated(header: String) async throws {
        try await withTestRelay { relay in
            let answer = try await relay.call("GET", "/v1/users/alice/messages", headers: ["Authorization": header])
            #expect(answer.status == 401)
            #expect(answer.problem == .unauthenticated)
        }
    }
}

/// A session row is an access or a refresh session, nothing else: the schema refuses other
/// kinds, and one stored before that check is never read as an access session.
@Suite struct SessionKindTests {
    @Test func aRowOfUnknownKindIsRefusedAndNeverReadAsAccess() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("sessionkind-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let path = folder.appendingPathComponent("relay.sqlite").path
        let odd = Data(repeating: 1, count: 32), access = Data(repeating: 2, count: 32)
        do {
            let queue = try DatabaseQueue(path: path)
            try Schema.migrator.migrate(queue, upTo: "v4: envelopes as base64url text")
            try await queue.write { db in
                for (hash, kind) in [(odd, 7), (access, 0)] {
                    try db.execute(sql: "INSERT INTO sessions (hash, kind, uid, family, expires_at) VALUES (?, ?, 'alice', x'00', 9999999999999)",
                                   arguments: [hash, kind])
                }
            }
        }
        let store = try SQLiteStore(path: path)
        #expect(try await store.session(hash: odd) == nil, "not carried over, and not read as access")
        #expect(try await store.session(hash: access)?.kind == .access)
        await #expect(throws: DatabaseError.self) {
            try await store.write("test") { db in
                try db.execute(sql: "INSERT INTO sessions (hash, kind, uid, family, expires_at) VALUES (x'03', 2, 'alice', x'00', 1)")
            }
        }
    }
}
