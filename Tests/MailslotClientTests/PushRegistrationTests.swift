import Foundation
import GRDB
@testable import MailslotClient
import MailslotRelay
import MailslotTestSupport
import MailslotWire
import Testing

/// The client library's wake-up API against a relay: registering, listing, replacing and
/// removing push targets, registering them again after each sign-in, a provider the relay does
/// not have, and what the relay makes of the `wake` flag (docs/design/wakeups.md §7.1, spec/push.md).
@Suite struct PushRegistrationTests {
    /// A Web Push subscription at `path` of a push service the relay does not call in these tests.
    static func webPush(_ path: String) -> DevicePushTarget {
        .webPush(endpoint: URL(string: "https://push.example.net/up/\(path)")!, p256dh: PushClientTests.p256dh, auth: PushClientTests.auth)
    }

    /// A relay with Web Push and the webhook on (test credentials; nothing reaches a push
    /// service: their names do not resolve here, and nothing listens at the webhook's port).
    static func withPushRelay<T>(_ body: (TestRelay) async throws -> T) async throws -> T {
        try await withTestRelay(configure: { try PushTestCredentials.enableWebPushAndWebhook(&$0) }, body)
    }

    @Test func registerListReplaceAndRemove() async throws {
        try await Self.withPushRelay { relay in
            let bob = try relay.client("bob")
            try await bob.signIn()
            let tag = try await bob.pushTag
            let first = try await bob.registerPush(Self.webPush("one"))
            #expect(first.provider == .webpush && first.tag == tag && first.endpoint == "https://push.example.net/up/one")
            #expect(first.wokenAt == nil)
            #expect(try await bob.pushRegistrations().map(\.id) == [first.id])

            // Without an id, a new subscription of the same provider replaces the kept one.
            let replaced = try await bob.registerPush(Self.webPush("two"))
            #expect(replaced.id == first.id)
            #expect(try await bob.pushRegistrations().map(\.endpoint) == ["https://push.example.net/up/two"])

            // Another id is another registration; its own tag when given.
            let hook = try await bob.registerPush(.webhook(token: "device 42"), id: "webhook-registration-1", tag: "phone")
            #expect(hook.id == "webhook-registration-1" && hook.provider == .webhook && hook.tag == "phone" && hook.token == "device 42")
            #expect(try await bob.pushRegistrations().map(\.id) == [first.id, hook.id].sorted())

            try await bob.removePush(id: first.id)
            #expect(try await bob.pushRegistrations().map(\.id) == [hook.id])
            // Gone already: still done, not an error.
            try await bob.removePush(id: first.id)
            #expect(try await bob.store.pushTargets().map(\.id) == [hook.id], "the removed target is no longer kept")

            // Only the owner sees them.
            let alice = try await relay.signIn("alice").session
            #expect(try await relay.call("GET", "/v1/users/bob/push", session: alice).status == 403)
        }
    }

    @Test func everySignInRegistersTheKeptTargetsAgain() async throws {
        try await Self.withPushRelay { relay in
            let bob = try relay.client("bob")
            try await bob.signIn()
            let registration = try await bob.registerPush(Self.webPush("phone"), tag: "bob-phone")
            // The registration disappears from the relay (removed with another sign-in, or by hand).
            let other = try await relay.signIn("bob").session
            #expect(try await relay.call("DELETE", "/v1/users/bob/push/\(registration.id)", session: other).status == 204)
            #expect(try await bob.pushRegistrations().isEmpty)

            try await bob.signIn()
            let again = try await bob.pushRegistrations()
            #expect(again.map(\.id) == [registration.id])
            #expect(again.first?.tag == "bob-phone", "the tag it was given, not the account's")
            #expect(again.first?.endpoint == "https://push.example.net/up/phone")

            // Signing out ends the registration with its sign-in; signing in brings it back.
            try await bob.signOut()
            try await bob.signIn()
            #expect(try await bob.pushRegistrations().map(\.id) == [registration.id])
        }
    }

    @Test func aProviderTheRelayDoesNotHaveIsATypedErrorAndNothingIsKept() async throws {
        try await withTestRelay { relay in
            let bob = try relay.client("bob")
            try await bob.signIn()
            await #expect(throws: ClientError.pushProviderDisabled(provider: .apns)) {
                try await bob.registerPush(.apns(deviceToken: Array(repeating: 0xAB, count: 32)))
            }
            #expect(try await bob.store.pushTargets().isEmpty)
            let configuration = try await bob.pushConfiguration()
            #expect(configuration.providers.isEmpty && configuration.vapidPublicKey == nil)
        }
    }

    @Test func theRelaysConfigurationIsTyped() async throws {
        try await Self.withPushRelay { relay in
            let bob = try relay.client("bob")
            try await bob.signIn()
            let configuration = try await bob.pushConfiguration()
            #expect(configuration.providers == [.webpush, .webhook])
            #expect(configuration.vapidPublicKey?.count == 65 && configuration.vapidPublicKey?.first == 0x04)
            #expect(configuration.wakeInterval >= .seconds(5))
            #expect(configuration.maxRegistrations >= 1)
        }
    }

    @Test func aRelayOutOfReachLeavesTheTargetKeptForTheNextSignIn() async throws {
        try await Self.withPushRelay { relay in
            let bob = try relay.client("bob")
            try await bob.signIn()
            let offline = try relay.client("bob", url: URL(string: "http://127.0.0.1:1")!)
            do {
                try await offline.registerPush(Self.webPush("later"), id: "kept-while-offline-1")
                Issue.record("registered without a relay")
            } catch ClientError.unreachable {}
            #expect(try await bob.pushRegistrations().isEmpty)
            try await bob.signIn()
            #expect(try await bob.pushRegistrations().map(\.id) == ["kept-while-offline-1"])
        }
    }

    /// What the relay makes of the flag the client sends: a typing indicator, a receipt and a
    /// message sent with `wake: false` leave no wake-up for bob's registration; a text does. Read
    /// in the relay's own database (SQLite): a pending `push_wakeups` row, or — once a dispatcher
    /// claimed it — the registration's `woken_at`.
    @Test func theRelayIsWokenByTextsButNotByTypingReceiptsOrNoWake() async throws {
        try await withTestRelay(store: .sqlite, configure: { try PushTestCredentials.enableWebPushAndWebhook(&$0) }) { relay in
            let alice = try relay.client("alice"), bob = try relay.client("bob")
            try await alice.signIn()
            try await bob.signIn()
            _ = try await alice.contact("bob")
            try await bob.registerPush(Self.webPush("bob"))
            var configuration = Configuration()
            configuration.readonly = true
            let database = try DatabaseQueue(path: relay.dataDirectory + "/relay.sqlite", configuration: configuration)
            @Sendable func woken() async throws -> Bool {
                let pending = try await database.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM push_wakeups WHERE uid = 'bob'") ?? 0 }
                if pending > 0 { return true }
                return try await bob.pushRegistrations().contains { $0.wokenAt != nil }
            }

            let quiet: [(Payload, MessageType, Bool?)] = [
                (Payload(typing: Typing(active: true)), .typing, nil),
                (Payload(receipt: Receipt(kind: .read, messageIDs: [MessageID.generate()])), .receipt, nil),
                (Payload(text: "no need to wake"), .text, false),
            ]
            for (payload, type, wake) in quiet {
                let outcome = try await alice.send(payload, type: type, to: "bob", wake: wake)
                guard case .sent = outcome else { Issue.record("\(type): \(outcome)"); return }
            }
            #expect(try await relay.pending("bob") == 3, "stored and delivered as any other")
            #expect(try await !woken(), "nothing to wake bob for yet")

            guard case .sent = try await alice.send(text: "wake up", to: "bob") else { Issue.record("not sent"); return }
            try await eventually("a wake-up for the text") { try await woken() }
        }
    }
}
