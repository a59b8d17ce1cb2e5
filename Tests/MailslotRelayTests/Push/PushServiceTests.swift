import Crypto
import MailslotCrypto
import Foundation
import MailslotTestSupport
import Testing
@testable import MailslotRelay
import MailslotWire

/// Push registrations over HTTP (spec/push.md §2, spec/protocol.md §4.22–§4.24, §9): answers,
/// the validation order (a request with several faults gets the first one's code), the limit,
/// owner-only access, removal with the sign-in, and the `wake` member of a create.
@Suite struct PushServiceTests {
    /// A relay with Web Push, APNs and the webhook on (FCM off), key files written as an
    /// operator would, `max` registrations per uid.
    static func withPushRelay<T>(max: Int = 10, allowPrivate: Bool = false, _ body: (TestRelay) async throws -> T) async throws -> T {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("mailslot-push-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        func secret(_ name: String, _ text: String) throws -> String {
            let path = folder + "/" + name
            guard FileManager.default.createFile(atPath: path, contents: Data(text.utf8), attributes: [.posixPermissions: 0o600]) else {
                throw TestRelayError("cannot write \(path)")
            }
            return path
        }
        let vapid = try secret("vapid.pem", P256.Signing.PrivateKey().pemRepresentation)
        let apns = try secret("apns.p8", P256.Signing.PrivateKey().pemRepresentation)
        let webhook = try secret("webhook", "whsec_" + Data((0..<32).map { _ in UInt8.random(in: 0...255) }).base64EncodedString() + "\n")
        return try await withTestRelay(configure: { configuration in
            configuration.push.maxRegistrations = max
            configuration.push.allowPrivateAddresses = allowPrivate
            configuration.push.webPush.keyFile = vapid
            configuration.push.webPush.subject = "mailto:ops@example.net"
            configuration.push.apns.keyFile = apns
            configuration.push.apns.keyID = "ABC123DEFG"
            configuration.push.apns.teamID = "DEF123GHIJ"
            configuration.push.apns.topic = "net.example.app"
            configuration.push.webhook.url = "https://backend.example.net/wake"
            configuration.push.webhook.secretFile = webhook
        }, body)
    }

    static let p256dh = Base64URL.encode(P256.KeyAgreement.PrivateKey().publicKey.x963Representation)
    static let auth = Base64URL.encode((0..<16).map { _ in UInt8.random(in: 0...255) })
    static func webPush(_ endpoint: String = "https://push.example.net/up/8f3Kq", tag: String = "k3J9vQ0aZx") -> [String: Any] {
        ["provider": "webpush", "endpoint": endpoint, "p256dh": p256dh, "auth": auth, "tag": tag]
    }
    static let apnsToken = String(repeating: "ab", count: 32)
    static let id = "Hq2vX0Ck9m1Lr8sWbTn2pQ", other = "Zq2vX0Ck9m1Lr8sWbTn2pQ"

    @Test func createReplaceListReadDelete() async throws {
        try await Self.withPushRelay { relay in
            let bob = try await relay.signIn("bob").session
            let path = "/v1/users/bob/push/\(Self.id)"
            let created = try await relay.call("PUT", path, session: bob, body: Self.webPush())
            #expect(created.status == 201, "\(created.text)")
            let registration = try created.decoded(PushRegistration.self)
            #expect(registration.id == Self.id && registration.provider == .webpush && registration.tag == "k3J9vQ0aZx")
            #expect(registration.endpoint == "https://push.example.net/up/8f3Kq" && registration.wokenAt == nil)
            #expect(!created.text.contains(Self.p256dh) && !created.text.contains(Self.auth), "the keys never come back")
            #expect(!created.text.contains("p256dh") && !created.text.contains("\"auth\""))

            // The same body again, then another body under the same id: both replace (200).
            #expect(try await relay.call("PUT", path, session: bob, body: Self.webPush()).status == 200)
            let replaced = try await relay.call("PUT", path, session: bob,
                                                body: ["provider": "apns", "token": Self.apnsToken, "sandbox": true, "mode": "background"])
            #expect(replaced.status == 200, "\(replaced.text)")
            let apns = try replaced.decoded(PushRegistration.self)
            #expect(apns.provider == .apns && apns.token == Self.apnsToken && apns.sandbox == true && apns.mode == .background)
            #expect(apns.tag == "" && apns.endpoint == nil && apns.createdAt == registration.createdAt)

            #expect(try await relay.call("PUT", "/v1/users/bob/push/\(Self.other)", session: bob,
                                         body: ["provider": "webhook"]).status == 201)
            let list = try await relay.call("GET", "/v1/users/bob/push", session: bob)
            let registrations = try list.decoded(PushRegistrationList.self).registrations
            #expect(registrations.map(\.id) == [Self.id, Self.other], "ordered by id")
            #expect(registrations.last?.provider == .webhook && registrations.last?.token == nil)
            #expect(try await relay.call("GET", path, session: bob).decoded(PushRegistration.self) == apns)
            // Created ones are counted, by provider; replacements are not.
            let metrics = relay.relay.metricsText()
            #expect(metrics.contains(#"mailslot_push_registrations_created_total{provider="webpush"} 1"#), "\(metrics)")
            #expect(metrics.contains(#"mailslot_push_registrations_created_total{provider="webhook"} 1"#))
            #expect(!metrics.contains(#"mailslot_push_registrations_created_total{provider="apns"}"#))

            #expect(try await relay.call("DELETE", path, session: bob).status == 204)
            #expect(try await relay.call("DELETE", path, session: bob).problem == .notFound)
            #expect(try await relay.call("GET", path, session: bob).problem == .notFound)
            #expect(try await relay.call("GET", "/v1/users/bob/push", session: bob).decoded(PushRegistrationList.self).registrations.count == 1)
        }
    }

    /// A request with several faults is answered with the first in spec order: media type →
    /// body size → strict JSON → `{uid}` → `{id}` → rule → provider known → provider enabled →
    /// members → endpoint → store.
    @Test func validationOrder() async throws {
        try await Self.withPushRelay { relay in
            let bob = try await relay.signIn("bob").session
            let good = "/v1/users/bob/push/\(Self.id)"
            func code(_ path: String, _ body: Any?, session: String? = nil, headers: [String: String] = [:]) async throws -> ProblemCode? {
                try await relay.call("PUT", path, session: session ?? bob, body: body, headers: headers).problem
            }
            let badEverything = "/v1/users/b!b/push/short"
            #expect(try await code(good, "{}", headers: ["Content-Type": "text/plain"]) == .unsupportedMediaType)
            #expect(try await code(badEverything, "{\"provider\":\"" + String(repeating: "x", count: 4100) + "\"}") == .bodyTooLarge)
            #expect(try await code(badEverything, "{\"provider\":\"webpush\",\"provider\":\"apns\"}") == .invalidJSON)
            #expect(try await code(badEverything, "not json") == .invalidJSON)
            #expect(try await code(badEverything, ["provider": "nope"]) == .invalidUID)
            #expect(try await code("/v1/users/alice/push/short", ["provider": "nope"]) == .invalidRegistrationID)
            #expect(try await code("/v1/users/alice/push/\(Self.id)", ["provider": "nope"]) == .forbidden)
            #expect(try await code(good, ["provider": "nope"]) == .invalidPushRegistration)
            #expect(try await code(good, ["endpoint": "x"]) == .invalidPushRegistration, "provider missing")
            #expect(try await code(good, ["provider": "fcm", "token": "!!", "stray": 1]) == .pushProviderDisabled, "enabled before members")
            #expect(try await code(good, ["provider": "webpush", "token": "t"]) == .invalidPushRegistration, "another provider's member")
            #expect(try await code(good, Self.webPush().merging(["p256dh": "AAAA", "endpoint": "https://10.0.0.7/x"]) { $1 })
                    == .invalidPushRegistration, "members before the endpoint's address")
            #expect(try await code(good, Self.webPush("https://10.0.0.7/x")) == .pushEndpointRefused)
            #expect(try await relay.call("GET", "/v1/users/bob/push", session: bob).decoded(PushRegistrationList.self).registrations.isEmpty,
                    "nothing stored by a refused request")
        }
    }

    /// Each member's rules, and the `detail` that names it.
    @Test func membersAreChecked() async throws {
        try await Self.withPushRelay { relay in
            let bob = try await relay.signIn("bob").session
            let path = "/v1/users/bob/push/\(Self.id)"
            let offCurve = Base64URL.encode([4] + [UInt8](repeating: 1, count: 64))
            let cases: [([String: Any], String)] = [
                (Self.webPush().merging(["p256dh": offCurve]) { $1 }, "p256dh"),
                (Self.webPush().merging(["p256dh": Self.p256dh + "="]) { $1 }, "p256dh"),
                (Self.webPush().merging(["auth": Base64URL.encode([UInt8](repeating: 1, count: 15))]) { $1 }, "auth"),
                (Self.webPush().merging(["endpoint": "not a url"]) { $1 }, "endpoint"),
                (Self.webPush().merging(["endpoint": 5]) { $1 }, "endpoint"),
                (Self.webPush(tag: String(repeating: "a", count: 49)), "tag"),
                (Self.webPush(tag: "a b"), "tag"),
                (["provider": "apns", "token": String(repeating: "AB", count: 32)], "token"),
                (["provider": "apns", "token": String(repeating: "a", count: 63)], "token"),
                (["provider": "apns", "token": Self.apnsToken, "mode": "loud"], "mode"),
                (["provider": "apns", "token": Self.apnsToken, "sandbox": "yes"], "sandbox"),
                (["provider": "apns"], "token"),
                (["provider": "webhook", "token": "line\nbreak"], "token"),
                (["provider": "webhook", "token": ""], "token"),
                (["provider": "webhook", "endpoint": "https://x.example.net/"], "endpoint"),
            ]
            for (body, member) in cases {
                let answer = try await relay.call("PUT", path, session: bob, body: body)
                #expect(answer.problem == .invalidPushRegistration, "\(body): \(answer.text)")
                #expect((answer.json["detail"] as? String)?.hasPrefix(member) == true, "\(body): \(answer.text)")
            }
            // The edges that are taken.
            #expect(try await relay.call("PUT", path, session: bob, body: Self.webPush(tag: String(repeating: "Z", count: 48))).status == 201)
            #expect(try await relay.call("PUT", path, session: bob,
                                         body: ["provider": "apns", "token": String(repeating: "f", count: 200)]).status == 200)
            #expect(try await relay.call("PUT", path, session: bob,
                                         body: ["provider": "webhook", "token": String(repeating: "~", count: 1024)]).status == 200)
            let disabled = try await relay.call("PUT", path, session: bob, body: ["provider": "fcm", "token": "abc:def"])
            #expect(disabled.problem == .pushProviderDisabled && disabled.json["detail"] as? String == "this relay does not send FCM wake-ups")
        }
    }

    /// The limit counts registrations, not requests: a new id beyond it is refused (nothing
    /// stored), a replacement at the limit is not.
    @Test func limitPerUser() async throws {
        try await Self.withPushRelay(max: 2) { relay in
            let bob = try await relay.signIn("bob").session
            let ids = ["AAAAAAAAAAAAAAAAAAAAAA", "BBBBBBBBBBBBBBBBBBBBBB", "CCCCCCCCCCCCCCCCCCCCCC"]
            #expect(try await relay.call("PUT", "/v1/users/bob/push/\(ids[0])", session: bob, body: ["provider": "webhook"]).status == 201)
            #expect(try await relay.call("PUT", "/v1/users/bob/push/\(ids[1])", session: bob, body: ["provider": "webhook"]).status == 201)
            let third = try await relay.call("PUT", "/v1/users/bob/push/\(ids[2])", session: bob, body: ["provider": "webhook"])
            #expect(third.status == 409 && third.problem == .tooManyRegistrations && third.json["detail"] as? String == "at most 2 push registrations per user")
            #expect(try await relay.call("PUT", "/v1/users/bob/push/\(ids[1])", session: bob, body: ["provider": "webhook", "tag": "t"]).status == 200)
            #expect(try await relay.call("GET", "/v1/users/bob/push", session: bob).decoded(PushRegistrationList.self).registrations.map(\.id)
                    == Array(ids.prefix(2)))
            // Another uid has its own count.
            let alice = try await relay.signIn("alice").session
            #expect(try await relay.call("PUT", "/v1/users/alice/push/\(ids[2])", session: alice, body: ["provider": "webhook"]).status == 201)
        }
    }

    /// Another user gets the same 403 on every route, whether the registration exists or not;
    /// without a session, 401.
    @Test func ownerOnly() async throws {
        try await Self.withPushRelay { relay in
            let bob = try await relay.signIn("bob").session
            let carol = try await relay.signIn("carol").session
            #expect(try await relay.call("PUT", "/v1/users/bob/push/\(Self.id)", session: bob, body: Self.webPush()).status == 201)
            for id in [Self.id, Self.other] {
                for (method, body) in [("GET", nil), ("DELETE", nil), ("PUT", Self.webPush() as Any?)] {
                    let answer = try await relay.call(method, "/v1/users/bob/push/\(id)", session: carol, body: body)
                    #expect(answer.status == 403 && answer.problem == .forbidden, "\(method) \(id)")
                    #expect(try await relay.call(method, "/v1/users/bob/push/\(id)", body: body).status == 401)
                }
            }
            #expect(try await relay.call("GET", "/v1/users/bob/push", session: carol).problem == .forbidden)
            #expect(try await relay.call("GET", "/v1/users/bob/push/\(Self.id)", session: bob).status == 200, "nothing changed")
        }
    }

    @Test func serviceInfo() async throws {
        try await Self.withPushRelay { relay in
            let carol = try await relay.signIn("carol").session
            #expect(try await relay.call("GET", "/v1/push").status == 401)
            let answer = try await relay.call("GET", "/v1/push", session: carol)
            let info = try answer.decoded(PushServiceInfo.self)
            #expect(info.providers == [.apns, .webhook, .webpush] && info.maxRegistrations == 10 && info.wakeIntervalSeconds == 30)
            #expect(info.vapidPublicKey?.count == 87 && Base64URL.decode(info.vapidPublicKey ?? "")?.first == 4)
        }
        try await withTestRelay { relay in
            let carol = try await relay.signIn("carol").session
            let answer = try await relay.call("GET", "/v1/push", session: carol)
            #expect(answer.text == #"{"max_registrations":10,"providers":[],"wake_interval_seconds":30}"#, "no key without Web Push")
            #expect(try await relay.call("PUT", "/v1/users/carol/push/\(Self.id)", session: carol, body: Self.webPush()).problem
                    == .pushProviderDisabled)
        }
    }

    /// A registration goes with the sign-in that wrote it; the owner's other sign-ins keep theirs.
    @Test func signOutRemovesTheFamilysRegistrations() async throws {
        try await Self.withPushRelay { relay in
            let phone = try await relay.signIn("bob").session
            let laptop = try await relay.signIn("bob").session
            #expect(try await relay.call("PUT", "/v1/users/bob/push/\(Self.id)", session: phone, body: Self.webPush()).status == 201)
            #expect(try await relay.call("PUT", "/v1/users/bob/push/\(Self.other)", session: laptop, body: ["provider": "webhook"]).status == 201)
            #expect(try await relay.call("DELETE", "/v1/sessions/current", session: phone).status == 204)
            let left = try await relay.call("GET", "/v1/users/bob/push", session: laptop).decoded(PushRegistrationList.self)
            #expect(left.registrations.map(\.id) == [Self.other])
        }
    }

    /// Whether a wake-up was queued for bob's registration `id`: still pending, or already
    /// claimed by the relay's dispatcher (which stamps `woken_at`).
    static func queuedAny(_ store: any RelayStore) async throws -> Bool {
        if try await store.nextWakeupDue() != nil { return true }
        return try await (store.registration(uid: "bob", id: id)?.wokenAt ?? 0) != 0
    }

    /// `wake` is a boolean member of a create (REST and WebSocket); `false` queues no wake-up,
    /// the default queues one for each registration.
    @Test func wakeMemberOfACreate() async throws {
        try await Self.withPushRelay { relay in
            let bob = try await relay.signIn("bob").session
            let alice = try await relay.signIn("alice").session
            #expect(try await relay.call("PUT", "/v1/users/bob/push/\(Self.id)", session: bob, body: ["provider": "webhook"]).status == 201)
            let store = relay.relay.store
            let envelope = Base64URL.encode(randomBytes(512))
            let quiet = try await relay.call("PUT", "/v1/users/bob/messages/\(messageID(1))", session: alice,
                                             body: ["envelope": envelope, "wake": false])
            #expect(quiet.status == 201)
            #expect(try await !Self.queuedAny(store), "wake: false queues nothing")
            #expect(try await relay.call("PUT", "/v1/users/bob/messages/\(messageID(2))", session: alice,
                                         body: ["envelope": envelope, "wake": "no"]).problem == .invalidJSON)
            #expect(try await relay.call("PUT", "/v1/users/bob/messages/\(messageID(3))", session: alice,
                                         body: ["envelope": envelope, "wake": true]).status == 201)
            #expect(try await Self.queuedAny(store), "a waking create queues one")
        }
    }
}
