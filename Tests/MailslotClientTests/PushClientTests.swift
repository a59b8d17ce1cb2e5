import Foundation
@testable import MailslotClient
import MailslotTestSupport
import MailslotWire
import Testing

/// The client library's side of wake-ups that needs no push routes: the account's tag, targets
/// refused before the relay is asked, and the `wake` flag kept with each queued send
/// (docs/design/wakeups.md §7.1, spec/push.md). PushRegistrationTests has the relay's side.
@Suite struct PushClientTests {
    /// RFC 8291 Appendix A's user agent key and secret: a point on the curve, as the relay checks.
    static let p256dh = Base64URL.decode("BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4")!
    static let auth = Base64URL.decode("BTBZMqHH6r4Tts7J_aSIgg")!

    @Test func theTagIsStablePerAccountAndDiffersBetweenAccounts() async throws {
        try await withTestRelay { relay in
            let bob = try relay.client("bob"), alice = try relay.client("alice")
            let tag = try await bob.pushTag
            #expect(tag.count == 22 && PushGrammar.isValidTag(tag))
            #expect(try await bob.pushTag == tag)
            #expect(try await alice.pushTag != tag)
            // The same store opened again (the app restarted): the same tag.
            #expect(try await relay.client("bob").pushTag == tag)
            // Another install of the same account: another store, another tag.
            #expect(try await relay.client("bob", profile: "bob-tablet").pushTag != tag)
        }
    }

    @Test func aTargetWrongOnItsFaceIsRefusedBeforeTheRelayIsAsked() async throws {
        // Nothing listens there: a refusal must come before any request.
        let client = try MailslotClient(relay: URL(string: "http://127.0.0.1:1")!,
                                        databasePath: FileManager.default.temporaryDirectory.appendingPathComponent("push-\(UUID())/c.sqlite").path) {
            "unused"
        }
        let endpoint = URL(string: "https://push.example.net/x")!
        let refused: [(DevicePushTarget, String?, String?)] = [
            (.webPush(endpoint: endpoint, p256dh: Array(Self.p256dh.prefix(33)), auth: Self.auth), nil, nil),
            (.webPush(endpoint: endpoint, p256dh: Self.p256dh, auth: Array(Self.auth.prefix(15))), nil, nil),
            (.webPush(endpoint: URL(string: "ftp://push.example.net/x")!, p256dh: Self.p256dh, auth: Self.auth), nil, nil),
            (.apns(deviceToken: Array(repeating: 1, count: 8)), nil, nil),
            (.fcm(token: "no spaces"), nil, nil),
            (.webhook(token: ""), nil, nil),
            (.fcm(token: "ok"), "short", nil),
            (.fcm(token: "ok"), nil, "no spaces in tags"),
        ]
        for (target, id, tag) in refused {
            do {
                try await client.registerPush(target, id: id, tag: tag)
                Issue.record("\(target) was not refused")
            } catch ClientError.invalidPushTarget {
            } catch {
                Issue.record("\(target): \(error)")
            }
        }
        await #expect(throws: ClientError.invalidPushTarget(reason: "a registration id is 16 to 64 of A-Z a-z 0-9 _ -")) {
            try await client.removePush(id: "../keys")
        }
    }

    /// Typing indicators and receipts go out with `"wake": false`, and so does a message sent
    /// with `wake: false`; other messages wake — kept with the message, so a later flush sends
    /// the same flag.
    @Test func typingAndReceiptsAreSentNotWaking() async throws {
        try await withTestRelay { relay in
            let alice = try relay.client("alice"), bob = try relay.client("bob")
            try await alice.signIn()
            try await bob.signIn()
            _ = try await alice.contact("bob")
            let offline = try relay.client("alice", url: URL(string: "http://127.0.0.1:1")!)
            let sends: [(Payload, MessageType, Bool?)] = [
                (Payload(text: "hello"), .text, nil),
                (Payload(typing: Typing(active: true)), .typing, nil),
                (Payload(receipt: Receipt(kind: .read, messageIDs: [MessageID.generate()])), .receipt, nil),
                (Payload(text: "quiet"), .text, false),
                (Payload(receipt: Receipt(kind: .delivered, messageIDs: [MessageID.generate()])), .receipt, true),
            ]
            var ids: [String] = []
            for (payload, type, wake) in sends {
                let outcome = try await offline.send(payload, type: type, to: "bob", wake: wake)
                guard case .queued(let id, _) = outcome else { Issue.record("\(outcome)"); return }
                ids.append(id)
            }
            let due = try await alice.store.due(now: Date().addingTimeInterval(3600).timeIntervalSince1970)
            #expect(ids.map { id in due.first { $0.id == id }?.wake } == [true, false, false, false, false])
        }
    }
}
