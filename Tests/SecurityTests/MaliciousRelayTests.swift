import Foundation
import GRDB
@testable import MailslotClient
import MailslotTestSupport
import MailslotWire
import Testing

/// The client library against a relay that lies (``LyingRelay``: a real relay behind a proxy that
/// changes one answer or frame at a time). Nothing a relay sends may crash the client or keep it
/// busy; what the client stored is never lost from what it shows; a stranger's garbage draws no
/// answer; and a forged key change shows as a change.
@Suite struct MaliciousRelayTests {
    /// Prekey counts no relay holds: the lowest Int, a large negative one (which made the old
    /// client fill one write transaction for minutes), one past the id space, the highest Int.
    static let impossibleCounts = ["-9223372036854775808", "-5000000", "4294967296", "9223372036854775807"]

    @Test(arguments: impossibleCounts)
    func anImpossiblePrekeyCountNeitherCrashesNorSpinsAndReceiveReturnsWhatItStored(_ count: String) async throws {
        try await withLyingRelay { liar in
            let alice = try liar.client("alice")
            try await alice.signIn()
            let made = try await oneTimePrekeys(alice)
            try await liar.sendFromBob(to: alice, 1...1, text: { _ in "from bob" })
            liar.lie("GET", "/v1/users/alice/prekeys", .replace { _ in .json(#"{"count":\#(count)}"#) })
            liar.lie("POST", "/v1/users/alice/prekeys", .rewrite { _, _ in .json(#"{"count":\#(count)}"#) })
            let started = ContinuousClock.now
            let received = try await alice.receive()
            #expect(received.map(\.message.payload.text) == ["from bob"], "stored, acknowledged and returned")
            #expect(ContinuousClock.now - started < .seconds(10), "no spin")
            #expect(try await oneTimePrekeys(alice) == made, "nothing made for a count no relay sends")
            #expect(liar.requests.contains("GET /v1/users/alice/prekeys"), "the count was asked (and refused)")
            #expect(try await liar.upstream.pending("alice") == 0)
        }
    }

    @Test(arguments: impossibleCounts)
    func anImpossiblePrekeyCountInTheReadyFrameDoesNotStopListening(_ count: String) async throws {
        try await withLyingRelay { liar in
            let alice = try liar.client("alice")
            try await alice.signIn()
            let made = try await oneTimePrekeys(alice)
            liar.lieInFrames { text in
                guard text.contains(#""type":"ready""#), let range = text.range(of: #""prekeys":[0-9]+"#, options: .regularExpression) else { return text }
                return text.replacingCharacters(in: range, with: #""prekeys":\#(count)"#)
            }
            let envelope = try await sealedByBob(to: alice, liar.upstream, id: messageID(2))
            let bob = try await liar.upstream.signIn("bob").session
            let first = try await firstLiveMessage(alice) { @Sendable in
                try await liar.upstream.send(bob, to: "alice", id: messageID(2), envelope: envelope)
            }
            #expect(first?.message.payload.text == "from bob", "the socket kept working after the lying ready frame")
            #expect(try await oneTimePrekeys(alice) == made)
        }
    }

    @Test func lyingSizesIdsAndCursorsAreBadAnswersAndNothingIsLost() async throws {
        try await withLyingRelay { liar in
            let alice = try liar.client("alice")
            try await alice.signIn()
            try await liar.sendFromBob(to: alice, 3...3, text: { _ in "from bob" })
            let lies: [(String, String)] = [
                (#""size":512"#, #""size":-1"#), (#""size":512"#, #""size":9223372036854775807"#), (#""size":512"#, #""size":513"#),
                (#""seq":"#, #""seq":-"#), (messageID(3), "../../sessions/current"), (#""author":"bob""#, #""author":"a/b""#),
                (#""next":null"#, #""next":"-1""#),
            ]
            for (truth, lie) in lies {
                liar.lie("GET", "/v1/users/alice/messages", times: 1, .rewrite { _, answer in
                    var answer = answer
                    answer.body = Data(String(decoding: answer.body, as: UTF8.self).replacingOccurrences(of: truth, with: lie).utf8)
                    return answer
                })
                await #expect(throws: ClientError.self, "\(lie)") { try await alice.receive() }
                #expect(try await alice.history().isEmpty, "\(lie): nothing stored from a refused page")
            }
            // A relay that always says "there is more" does not keep the client asking.
            liar.lie("GET", "/v1/users/alice/messages", times: 5, .rewrite { _, answer in
                var answer = answer
                answer.body = Data(String(decoding: answer.body, as: UTF8.self).replacingOccurrences(of: #""next":null"#, with: #""next":"1""#).utf8)
                return answer
            })
            let interrupted = try await #require(throws: ReceiveInterrupted.self) { try await alice.receive() }
            #expect(interrupted.received.map(\.id) == [messageID(3)], "what was stored comes with the failure")
            liar.tellTheTruth()
            #expect(try await alice.receive().isEmpty, "not shown twice")
            #expect(try await liar.upstream.pending("alice") == 0)
        }
    }

    @Test func aFailedAcknowledgementDoesNotHideWhatWasStoredAndIsRepeated() async throws {
        try await withLyingRelay { liar in
            let alice = try liar.client("alice")
            try await alice.signIn()
            try await liar.sendFromBob(to: alice, 11...13)
            // The second acknowledgement fails (the relay does not erase the message), with a
            // retry_after no relay sends as well: a bad answer is a failure like a 500.
            liar.lie("DELETE", "/v1/users/alice/messages/\(messageID(12))", times: 1, .replace { _ in .problem(.internalError) })
            let interrupted = try await #require(throws: ReceiveInterrupted.self) { try await alice.receive() }
            #expect(interrupted.received.map(\.message.payload.text) == ["m11", "m12"], "the stored messages come with the failure")
            #expect(interrupted.failure as? ClientError == .relay(problem: Problem(.internalError, "said by a lying relay")))
            #expect(try await liar.upstream.pending("alice") == 2, "m12 (not acknowledged) and m13 (not reached) wait")

            liar.lie("DELETE", "/v1/users/alice/messages/\(messageID(13))", times: 1,
                     .replace { _ in .json(#"{"code":"unavailable","status":503,"title":"unavailable","retry_after":-1}"#, status: 503) })
            let again = try await #require(throws: ReceiveInterrupted.self) { try await alice.receive() }
            #expect(again.received.map(\.message.payload.text) == ["m13"], "m12 is known: acknowledged, not shown again")
            guard case ClientError.invalidResponse = again.failure else { Issue.record("\(again.failure)"); return }

            #expect(try await alice.receive().isEmpty)
            #expect(liar.requests.filter { $0 == "DELETE /v1/users/alice/messages/\(messageID(12))" }.count == 2, "acknowledged again")
            #expect(try await liar.upstream.pending("alice") == 0)
            #expect(try await alice.history().map(\.message.payload.text) == ["m11", "m12", "m13"])
        }
    }

    @Test func anAcknowledgementAnswered404IsDone() async throws {
        try await withLyingRelay { liar in
            let alice = try liar.client("alice")
            try await alice.signIn()
            try await liar.sendFromBob(to: alice, 21...22)
            liar.lie("DELETE", "/v1/users/alice/messages/", times: 2, .replace { _ in .problem(.notFound) })
            #expect(try await alice.receive().map(\.message.payload.text) == ["m21", "m22"], "gone already: done, and the run goes on")
        }
    }

    @Test func theCommandLinePrintsWhatItStoredBeforeAFailedAcknowledgement() async throws {
        try await withLyingRelay { liar in
            let home = liar.upstream.folder + "/cli"
            func mailslot(_ arguments: [String]) async throws -> ProcessResult {
                try await ProcessRunner.run(ProcessRunner.builtProduct("mailslot"), arguments,
                                            environment: ["MAILSLOT_HOME": home, "HOME": home, "PATH": "/usr/bin:/bin"])
            }
            let login = try await mailslot(["login", "--profile", "alice", "--relay", liar.url.absoluteString, "--token", try liar.upstream.token("alice")])
            #expect(login.status == 0, "\(login.stderr)")
            let bob = try liar.client("bob", direct: true)
            try await bob.signIn()
            try await bob.send(text: "first", to: "alice")
            guard case .sent(let second) = try await bob.send(text: "second", to: "alice") else { Issue.record("not sent"); return }
            liar.lie("DELETE", "/v1/users/alice/messages/\(second)", times: 1, .replace { _ in .problem(.internalError) })

            let failed = try await mailslot(["receive", "--profile", "alice"])
            #expect(failed.stdout.contains("first") && failed.stdout.contains("second"), "both stored, both printed: \(failed.stdout)")
            #expect(failed.status == 69, "the acknowledgement's failure is reported")
            #expect(failed.stderr.contains("internal"), "\(failed.stderr)")
            let again = try await mailslot(["receive", "--profile", "alice"])
            #expect(again.status == 0 && !again.stdout.contains("second"), "acknowledged now, not printed twice: \(again.stdout)")
            #expect(try await liar.upstream.pending("alice") == 0)
        }
    }

    // MARK: Notices to strangers (spec/envelope.md §4.2 item 4)

    @Test func aStrangersGarbageIsRejectedWithoutNoticePinOrPrekeyClaim() async throws {
        try await withLyingRelay { liar in
            let bob = try liar.client("bob")
            try await bob.signIn()
            let mallory = try await liar.upstream.signIn("mallory").session
            try await liar.client("mallory", direct: true).signIn()  // mallory has keys: a notice could be sealed to her
            for n in 1...20 { try await liar.upstream.send(mallory, to: "bob", id: messageID(100 + n)) }
            #expect(try await bob.receive().isEmpty)
            #expect(try await bob.rejected().count == 20)
            #expect(try await bob.rejected().allSatisfy { $0.reason == .unreadable(code: "envelope_cannot_decrypt") })
            #expect(try await bob.outgoing().isEmpty, "no notice")
            #expect(try await bob.contacts().isEmpty, "mallory is not pinned")
            #expect(!liar.requests.contains { $0.hasPrefix("GET /v1/users/mallory/keys") || $0.hasPrefix("POST /v1/users/mallory/prekeys/claim") },
                    "\(liar.requests)")
            #expect(try await liar.upstream.pending("bob") == 0, "acknowledged all the same")
        }
    }

    @Test func aStrangersRatchetMessageThatDoesNotOpenPinsNobody() async throws {
        try await withLyingRelay { liar in
            let bob = try liar.client("bob"), mallory = try liar.client("mallory", direct: true)
            try await bob.signIn()
            try await mallory.signIn()
            try await mallory.send(text: "a ratchet start bob cannot open", to: "bob")
            // Bob's one-time prekeys are gone (a restored backup, say): the start names one he lacks.
            try await bob.store.pool.write { db in try db.execute(sql: "DELETE FROM one_time_prekeys") }
            #expect(try await bob.receive().isEmpty)
            #expect(try await bob.rejected().map(\.reason.code) == ["envelope_unknown_prekey"])
            #expect(try await bob.outgoing().isEmpty, "no notice")
            #expect(try await bob.contacts().isEmpty, "mallory is not pinned: her message did not open")
            #expect(!liar.requests.contains { $0.hasPrefix("GET /v1/users/mallory/keys") }, "\(liar.requests)")
        }
    }

    @Test func aContactsGarbageStillDrawsANotice() async throws {
        try await withLyingRelay { liar in
            let bob = try liar.client("bob"), alice = try liar.client("alice", direct: true)
            try await bob.signIn()
            try await alice.signIn()
            try await alice.send(text: "hello", to: "bob")
            #expect(try await bob.receive().count == 1)
            let session = try await liar.upstream.signIn("alice").session
            try await liar.upstream.send(session, to: "bob", id: messageID(200))
            #expect(try await bob.receive().isEmpty)
            #expect(try await bob.rejected().map(\.reason.code) == ["envelope_cannot_decrypt"])
            let notices = try await bob.outgoing().filter { $0.message?.type == .receipt }
            #expect(notices.map(\.recipient) == ["alice"])
            #expect(notices.first?.message?.payload.receipt?.messageIDs == [messageID(200)])
        }
    }

    @Test func noticesToOneAuthorAreBoundedADay() async throws {
        try await withLyingRelay { liar in
            let bob = try liar.client("bob"), alice = try liar.client("alice", direct: true)
            try await bob.signIn()
            try await alice.signIn()
            try await alice.send(text: "hello", to: "bob")
            #expect(try await bob.receive().count == 1)
            let session = try await liar.upstream.signIn("alice").session
            // Sent as they are made (alice's keys stay): the waiting bound does not apply, the daily one does.
            for n in 1...(ClientStore.maxNoticesPerAuthor + 4) { try await liar.upstream.send(session, to: "bob", id: messageID(300 + n)) }
            #expect(try await bob.receive().isEmpty)
            let notices = try await bob.outgoing().filter { $0.message?.type == .receipt }
            #expect(notices.count == ClientStore.maxNoticesPerAuthor, "at most this many a day to one author")
            #expect(notices.allSatisfy { $0.state == .sent })
        }
    }

    // MARK: A forged key change (issue 26 item 1)

    @Test func aForgedKeyChangeShowsANumberThePeerDoesNotSee() async throws {
        try await withLyingRelay { liar in
            let alice = try liar.client("alice"), bob = try liar.client("bob", direct: true)
            try await alice.signIn()
            try await bob.signIn()
            try await alice.send(text: "before", to: "bob")
            #expect(try await bob.receive().count == 1)
            // The relay says bob's keys changed and serves a bundle of its own for him.
            let forged = LyingRelay.forgedBundle(for: "bob")
            let bundle = String(decoding: forged.bundle.encoded(), as: UTF8.self)
            liar.lie("PUT", "/v1/users/bob/messages/", times: 1, .replace { _ in .problem(.staleKeys) })
            liar.lie("GET", "/v1/users/bob/keys", .replace { _ in .json(bundle) })
            guard case .held(_, "bob") = try await alice.send(text: "the launch code is 0000", to: "bob") else { Issue.record("not held"); return }
            #expect(try await alice.outgoing().contains { $0.state == .held })
            let shownToAlice = try await alice.safetyNumberCheck(with: "bob")
            let shownToBob = try await bob.safetyNumber(with: "alice")
            #expect(shownToAlice.isNewKey, "alice is told that this is a new key")
            #expect(shownToAlice.safetyNumber != shownToBob, "the users compare numbers that differ: the change is forged")
            // Alice trusts with the number bob read out to her: refused, and nothing goes to the relay's key.
            let asked = liar.requests.count
            await #expect(throws: ClientError.safetyNumberMismatch(uid: "bob")) {
                try await alice.trust("bob", safetyNumber: shownToBob)
            }
            #expect(try await alice.outgoing().filter { $0.state == .held }.count == 1, "the message stays held")
            #expect(!liar.requests.dropFirst(asked).contains { $0.hasPrefix("PUT /v1/users/bob/messages/") },
                    "nothing sealed to the forged key reached the relay")
        }
    }
}

// MARK: Helpers

extension LyingRelay {
    /// A client for `uid` talking to the lying relay (or, `direct`, to the real one behind it),
    /// with its own database in the test relay's folder.
    func client(_ uid: String, direct: Bool = false) throws -> MailslotClient {
        let upstream = upstream
        return try MailslotClient(relay: direct ? upstream.url : url, databasePath: "\(upstream.folder)/\(uid)/client.sqlite") {
            try upstream.token(uid)
        }
    }
}

extension LyingRelay {
    /// Stores on the real relay, for `recipient`, a readable message from bob under each id
    /// `messageID(n)` of `numbers`, with the text `text(n)` ("m" and the number by default).
    func sendFromBob(to recipient: MailslotClient, _ numbers: ClosedRange<Int>,
                     text: (Int) -> String = { "m\($0)" }) async throws {
        let bob = try await upstream.signIn("bob").session, owner = try await recipient.identity().uid
        for n in numbers {
            let envelope = try await sealedByBob(to: recipient, upstream, id: messageID(n), text: text(n))
            try await upstream.send(bob, to: owner, id: messageID(n), envelope: envelope)
        }
    }
}

/// The one-time prekey secrets `client` holds.
func oneTimePrekeys(_ client: MailslotClient) async throws -> Int {
    try await client.store.pool.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM one_time_prekeys") ?? 0 }
}

/// A version 1 envelope from `bob` (``bobIdentity``, published on `relay`) to `recipient` as `id`,
/// sealed to the mailbox key the recipient published: a readable message that needs no client
/// for bob, so that the relay's answers to the recipient are all a test changes.
func sealedByBob(to recipient: MailslotClient, _ relay: TestRelay, id: String, text: String = "from bob") async throws -> [UInt8] {
    let me = try await recipient.identity()
    let bob = bobIdentity
    let session = try await relay.signIn("bob").session
    let bundle = KeyBundle(uid: "bob", identity: bob, mailboxKey: MailboxKeyPair().publicKey)
    _ = try await relay.call("PUT", "/v1/users/bob/keys", session: session, body: Data(bundle.encoded()))
    let message = ChatMessage(type: .text, sender: Sender(id: "bob"), payload: Payload(text: text), timestamp: 1_800_000_000_000)
    return try Envelope.seal(message, id: id, from: "bob", identity: bob, to: me.uid, mailboxKey: me.mailbox.publicKey)
}

/// Bob's identity for ``sealedByBob(to:_:id:text:)``: one per test process (each test has its own relay).
let bobIdentity = IdentityKeyPair()

extension TestRelay {
    /// How many messages wait in `uid`'s mailbox, asked as its owner.
    func pending(_ uid: String) async throws -> Int {
        let page = try await call("GET", "/v1/users/\(uid)/messages", session: try await signIn(uid).session)
        return try page.decoded(MessagePage.self).messages.count
    }
}

/// The first message `client`'s live stream yields once `send` ran (after it connected), or nil
/// after 15 s.
func firstLiveMessage(_ client: MailslotClient, after send: @escaping @Sendable () async throws -> Void) async throws -> ReceivedMessage? {
    let connected = AsyncStream<Void>.makeStream()
    let stream = client.messages { state in if state == .connected { connected.continuation.yield() } }
    do {
        return try await withDeadline(.seconds(15), "a live message") {
            try await withThrowingTaskGroup(of: ReceivedMessage?.self) { group in
                group.addTask {
                    for try await message in stream { return message }
                    return nil
                }
                for await _ in connected.stream { break }
                try await send()
                let first = try await group.next() ?? nil
                group.cancelAll()
                return first
            }
        }
    } catch is DeadlinePassed {
        return nil
    }
}
