import Foundation
import MailslotAudit
import MailslotTestSupport
import MailslotWire
import Testing
@testable import MailslotRelay

/// Wake-ups end to end against the push stand-ins (`tools/push run`; docs/design/wakeups.md §9.3,
/// issue 29's "done when"): a relay configured for all four providers at the stand-ins, which
/// check every request strictly as the provider documents it (Web Push decrypted with http_ece and
/// VAPID verified with py_vapid, APNs' ES256 token over HTTP/2, Google's RS256 assertion and FCM
/// v1, the Standard Webhooks signature) and answer errors on command. The relays run with a 5 s
/// wake interval. Serialized: the stand-ins' scripted answers are shared by every relay.
@Suite(.serialized, .enabled(if: PushStandins.available, PushStandins.skipReason))
struct PushStandinTests {
    var standins: PushStandins { PushStandins.current! }

    /// A relay at the stand-ins, with alice and bob signed in.
    func withPushRelay<T>(without: Set<String> = [], extra: [String: String] = ["push-wake-interval": "5"],
                          _ body: (TestRelay, _ alice: String, _ bob: String) async throws -> T) async throws -> T {
        let standins = standins
        try await standins.reset()
        return try await withTestRelay(configure: { try standins.configure(&$0, extra: extra, without: without) }) { relay in
            let alice = try await relay.signIn("alice").session
            let bob = try await relay.signIn("bob").session
            return try await body(relay, alice, bob)
        }
    }

    // MARK: The "done when" story, through each provider

    /// Bob registers and is offline; alice sends three in a row: exactly one wake-up, carrying
    /// bob's tag and nothing else, accepted by the stand-in's checks. While bob listens, none.
    /// When the provider says the registration is dead, `GET …/push` no longer lists it.
    @Test(arguments: PushCase.allCases)
    func threeMessagesWakeOnceNoneWhileListeningAndADeadAnswerRemoves(_ kind: PushCase) async throws {
        try await withPushRelay { relay, alice, bob in
            let registration = try await relay.registerPush(kind, uid: "bob", session: bob, standins: standins)
            for _ in 0..<3 { try await relay.sendMessage(alice, to: "bob") }
            let first = try await standins.awaitRequests(kind, for: registration.target)
            try await relay.expectNoWakeUpDueBeforeTheInterval(["bob"], interval: 5_000)
            let requests = try await standins.requests(kind, for: registration.target)
            #expect(requests.count == 1, "three messages within the interval wake once: \(requests)")
            #expect(first[0].ok && first[0].status.map { $0 < 300 } == true, "the stand-in accepted it: \(first[0])")
            #expect(first[0].tag == registration.tag, "the wake-up carries bob's tag and nothing else")
            if kind == .webpush {
                #expect(first[0].claims["sub"] == "mailto:push-tests@mailslot.invalid")
            }
            if kind == .webhook {
                #expect(first[0].signedBy == [0, 1], "every secret of the file signs (rotation)")
            }
            if kind == .apns {
                #expect(try await standins.state("apns")["distinct_ids"] == 1, "one provider token per node (Apple: ≥ 20 min apart)")
            }

            // While bob listens: no wake-up, even once the row is due (woken_at + 5 s): the claim
            // postpones it (the skipped counter moves), and only then is the log looked at.
            let socket = try await RelaySocket.subscribed(relay, "bob", session: bob)
            try await relay.sendMessage(alice, to: "bob")
            try await relay.awaitSkipped("connected")
            #expect(try await standins.requests(kind, for: registration.target).count == 1, "no wake-up while bob listens")

            // The provider calls the registration dead: it is removed; the client sees it gone.
            let dead: [String: Any] = switch kind {
            case .webpush: ["next": [410]]
            case .apns: ["next": [["status": 410, "reason": "Unregistered"]]]
            case .fcm: ["next": [404]]
            case .webhook: ["next": [410]]
            }
            try await standins.command(kind.standin, dead)
            await socket.close()  // the message sent while he listened is still pending: it wakes now
            _ = try await standins.awaitRequests(kind, for: registration.target, count: 2, within: .seconds(30))
            try await eventually(within: .seconds(10), "the dead registration is removed") {
                try await relay.pushRegistrationIDs(uid: "bob", session: bob).isEmpty
            }
            #expect(relay.sum("mailslot_push_registrations_removed_total", labelsContaining: [kind.rawValue, "dead"]) == 1)
            #expect(relay.sum("mailslot_push_sent_total", labelsContaining: [kind.rawValue]) >= 1)
        }
    }

    /// APNs in sandbox mode goes to the sandbox URL.
    @Test func aSandboxTokenGoesToTheSandboxURL() async throws {
        try await withPushRelay { relay, alice, bob in
            let registration = try await relay.registerPush(.apns, uid: "bob", session: bob, standins: standins, sandbox: true)
            try await relay.sendMessage(alice, to: "bob")
            let requests = try await standins.awaitRequests(.apns, for: registration.target)
            #expect(requests[0].ok && requests[0].sandbox, "\(requests[0])")
        }
    }

    // MARK: The wake rule

    /// `"wake": false` (typing, receipts) stores and delivers the message but wakes nothing.
    @Test func wakeFalseWakesNothing() async throws {
        try await withPushRelay { relay, alice, bob in
            let registration = try await relay.registerPush(.webpush, uid: "bob", session: bob, standins: standins)
            try await relay.sendMessage(alice, to: "bob", wake: false)
            // The decision is the commit's: no wake-up row was queued (read first), and none was
            // claimed since (a claim sets woken_at in the transaction that takes the row).
            #expect(try await relay.relay.store.nextWakeupDue() == nil, "no wake-up queued for wake: false")
            #expect(try await relay.relay.store.registrations(uid: "bob").map(\.wokenAt) == [0], "none claimed")
            #expect(try await standins.requests(.webpush, for: registration.target).isEmpty)
            // The same relay wakes for an ordinary message: the silence above was the flag's.
            try await relay.sendMessage(alice, to: "bob")
            _ = try await standins.awaitRequests(.webpush, for: registration.target)
        }
    }

    /// After the interval, with bob still not fetching, another message wakes him again — no
    /// earlier than the interval after the first.
    @Test func afterTheIntervalAnotherMessageWakesAgain() async throws {
        try await withPushRelay { relay, alice, bob in
            let registration = try await relay.registerPush(.webpush, uid: "bob", session: bob, standins: standins)
            try await relay.sendMessage(alice, to: "bob")
            let first = try await standins.awaitRequests(.webpush, for: registration.target)
            try await relay.sendMessage(alice, to: "bob")
            let both = try await standins.awaitRequests(.webpush, for: registration.target, count: 2, within: .seconds(20))
            #expect(both.count == 2)
            #expect(both[1].time - first[0].time >= 4.9, "the second wake-up waited for the 5 s interval: \(both[1].time - first[0].time) s")
        }
    }

    /// A wake-up whose messages bob fetched before it was due is dropped (rule 4).
    @Test func aWakeUpForMessagesAlreadyFetchedIsDropped() async throws {
        try await withPushRelay { relay, alice, bob in
            let registration = try await relay.registerPush(.webpush, uid: "bob", session: bob, standins: standins)
            try await relay.sendMessage(alice, to: "bob")
            _ = try await standins.awaitRequests(.webpush, for: registration.target)
            // A second message makes a row due at woken_at + 5 s; bob fetches and acks meanwhile.
            try await relay.sendMessage(alice, to: "bob")
            let socket = try await RelaySocket.subscribed(relay, "bob", session: bob)
            var acked = 0
            while acked < 2, let frame = try await socket.next(timeout: .seconds(5)) {
                if case .message(let message) = frame {
                    try await socket.send(.ack(message.id))
                } else if frame.type == "acked" {
                    acked += 1
                }
            }
            #expect(acked == 2)
            await socket.close()
            // The claim finds the row due and drops it (the skipped counter moves): only then look.
            try await relay.awaitSkipped("received")
            #expect(try await standins.requests(.webpush, for: registration.target).count == 1, "nothing was left to wake bob for")
        }
    }

    // MARK: Failures

    /// A 429 with Retry-After: retried, no earlier than it said.
    @Test func retryAfterIsHonoured() async throws {
        try await withPushRelay { relay, alice, bob in
            let registration = try await relay.registerPush(.webpush, uid: "bob", session: bob, standins: standins)
            try await standins.command("webpush", ["next": [["status": 429, "retry_after": 7]]])
            try await relay.sendMessage(alice, to: "bob")
            let requests = try await standins.awaitRequests(.webpush, for: registration.target, count: 2, within: .seconds(30))
            #expect(requests[0].status == 429 && requests[1].status == 201)
            #expect(requests[1].time - requests[0].time >= 6.9, "retried \(requests[1].time - requests[0].time) s later, Retry-After said 7")
            #expect(try await relay.pushRegistrationIDs(uid: "bob", session: bob) == [registration.id], "a 429 removes nothing")
        }
    }

    /// A configuration error (APNs refuses the provider token) pauses the provider and removes
    /// nothing: the operator's fault is never blamed on a device.
    @Test func aConfigurationErrorPausesTheProviderAndRemovesNothing() async throws {
        try await withPushRelay { relay, alice, bob in
            let registration = try await relay.registerPush(.apns, uid: "bob", session: bob, standins: standins)
            try await standins.command("apns", ["next": [["status": 403, "reason": "InvalidProviderToken"],
                                                         ["status": 403, "reason": "InvalidProviderToken"],
                                                         ["status": 403, "reason": "InvalidProviderToken"]]])
            try await relay.sendMessage(alice, to: "bob")
            _ = try await standins.awaitRequests(.apns, for: registration.target)
            try await eventually("mailslot_push_paused{provider=\"apns\"} is 1") {
                relay.sum("mailslot_push_paused", labelsContaining: ["apns"]) == 1
            }
            #expect(try await relay.pushRegistrationIDs(uid: "bob", session: bob) == [registration.id])
            #expect(relay.sum("mailslot_push_registrations_removed_total", labelsContaining: ["apns"]) == 0)
        }
    }

    /// A registration-attributable failure three times in a row removes it (`failing`).
    @Test func threeBlamedFailuresRemoveTheRegistration() async throws {
        try await withPushRelay { relay, alice, bob in
            let registration = try await relay.registerPush(.fcm, uid: "bob", session: bob, standins: standins)
            try await standins.command("fcm", ["next": [400, 400, 400]])
            for round in 1...3 {
                try await relay.sendMessage(alice, to: "bob")
                _ = try await standins.awaitRequests(.fcm, for: registration.target, count: round, within: .seconds(20))
            }
            try await eventually("the failing registration is removed") {
                try await relay.pushRegistrationIDs(uid: "bob", session: bob).isEmpty
            }
            #expect(relay.sum("mailslot_push_registrations_removed_total", labelsContaining: ["fcm", "failing"]) == 1)
        }
    }

    /// A provider that hangs holds at most its route's slots (4 per Web Push host, 8 for the
    /// webhook, 16 in all) and does not slow the message path.
    @Test func aHangingProviderHoldsBoundedSlotsAndTheMessagePathStaysFast() async throws {
        try await withPushRelay { relay, alice, _ in
            try await standins.command("webpush", ["hang": true])
            try await standins.command("webhook", ["hang": true])
            var recipients: [String] = []
            for index in 0..<24 {
                let uid = "user\(index)"
                let session = try await relay.signIn(uid).session
                _ = try await relay.registerPush(index % 2 == 0 ? .webpush : .webhook, uid: uid, session: session, standins: standins)
                recipients.append(uid)
            }
            let clock = ContinuousClock()
            var slowest: Duration = .zero
            for _ in 0..<3 {
                for uid in recipients {
                    let started = clock.now
                    try await relay.sendMessage(alice, to: uid)
                    slowest = max(slowest, clock.now - started)
                }
            }
            try await eventually("the hung calls reach their caps") {
                let webpush = try await standins.state("webpush")["hanging"] ?? 0
                let webhook = try await standins.state("webhook")["hanging"] ?? 0
                return webpush >= 4 && webhook >= 8
            }
            let webpush = try await standins.state("webpush")["max_hanging"] ?? 0
            let webhook = try await standins.state("webhook")["max_hanging"] ?? 0
            #expect(webpush <= 4, "one Web Push host holds at most 4 calls, held \(webpush)")
            #expect(webhook <= 8, "the webhook route holds at most 8 calls, held \(webhook)")
            // The dispatcher has looked at the table with its caps full and left the rest due (12
            // registrations beyond the 4 + 8 slots) instead of starting more calls.
            try await eventually("the rest of the wake-ups wait while the caps are full") {
                relay.counter("mailslot_push_due") >= 12
            }
            #expect(relay.counter("mailslot_push_in_flight") <= 12, "no call beyond the routes' caps")
            #expect(slowest < .seconds(1), "a create took \(slowest) while the providers hung")
            try await standins.command("webpush", ["hang": false])
            try await standins.command("webhook", ["hang": false])
        }
    }

    // MARK: Sign-out

    /// Signing out removes that sign-in's registrations; another sign-in's stay.
    @Test func signOutRemovesTheRegistrationsOfThatSignInOnly() async throws {
        try await withPushRelay { relay, _, bob in
            let phone = try await relay.registerPush(.fcm, uid: "bob", session: bob, standins: standins)
            let laptop = try await relay.signIn("bob").session
            let browser = try await relay.registerPush(.webpush, uid: "bob", session: laptop, standins: standins)
            let out = try await relay.call("DELETE", "/v1/sessions/current", session: bob)
            #expect(out.status == 204, "\(out.summary)")
            #expect(try await relay.pushRegistrationIDs(uid: "bob", session: laptop) == [browser.id], "the phone's went with its sign-in")
            _ = phone
        }
    }

    // MARK: Outbound calls are an attack surface

    /// Without `--push-allow-private-addresses`: loopback and private literals are refused at
    /// registration, and a name that resolves to one is refused at call time — the stand-in
    /// never sees a request.
    @Test func privateAddressesAreRefusedWithoutTheAllowance() async throws {
        try await withPushRelay(without: ["push-allow-private-addresses"]) { relay, alice, bob in
            let sub = try await standins.subscribe(tls: true)
            for endpoint in [sub.endpoint, sub.endpoint.replacingOccurrences(of: "https://", with: "http://"),
                             "https://10.0.0.7/x", "https://localhost:\(standins.ports["webpush_tls"]!)/push/\(sub.id)",
                             "https://[::1]:8443/x", "https://user@push.example.net/x", "https://push.example.net:80/x"] {
                let answer = try await relay.call("PUT", "/v1/users/bob/push/\(newRegistrationID())", session: bob,
                                                  body: ["provider": "webpush", "endpoint": endpoint, "p256dh": sub.p256dh, "auth": sub.auth])
                #expect(answer.status == 400 && answer.code == "push_endpoint_refused", "\(endpoint): \(answer.summary)")
            }
            // A name (this machine's) that resolves to a private or loopback address: refused at
            // the call (the relay resolves and checks every address), or already at registration
            // when the name is not a fully qualified one (a bare host name, as on most test
            // machines). Only a name in DNS or /etc/hosts with a dot would reach the call-time
            // check here; AddressPolicyTests cover it with given addresses.
            let host = ProcessInfo.processInfo.hostName
            let named = try await standins.subscribe(tls: true, host: host)
            let attempt = try await relay.call("PUT", "/v1/users/bob/push/\(newRegistrationID())", session: bob,
                                               body: ["provider": "webpush", "endpoint": named.endpoint, "p256dh": named.p256dh, "auth": named.auth])
            if attempt.status == 400 {
                #expect(attempt.code == "push_endpoint_refused", "\(host): \(attempt.summary)")
                return
            }
            #expect(attempt.status == 201, "\(host): \(attempt.summary)")
            let registration = (id: "", tag: "", target: named.id)
            try await relay.sendMessage(alice, to: "bob")
            try await eventually("the call was refused for its address") {
                relay.sum("mailslot_push_failed_total", labelsContaining: ["webpush", "address"]) >= 1
            }
            #expect(try await standins.requests(.webpush, for: registration.target).isEmpty, "no request reached \(host)")
        }
    }

    /// A 302 from a push service is never followed (it would aim the relay anywhere).
    @Test func aRedirectIsNotFollowed() async throws {
        try await withPushRelay { relay, alice, bob in
            let registration = try await relay.registerPush(.webpush, uid: "bob", session: bob, standins: standins)
            try await standins.command("webpush", ["next": [302]])
            try await relay.sendMessage(alice, to: "bob")
            let requests = try await standins.awaitRequests(.webpush, for: registration.target)
            #expect(requests[0].status == 302)
            try await eventually("the redirect is counted") {
                relay.sum("mailslot_push_failed_total", labelsContaining: ["webpush", "redirect"]) >= 1
            }
            // The call ended when the failure was counted: a followed redirect would be logged by then.
            #expect(try await standins.log("webpush").allSatisfy { !$0.followedRedirect }, "the relay followed the redirect")
        }
    }
}
