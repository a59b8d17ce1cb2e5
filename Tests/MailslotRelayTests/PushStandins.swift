import Foundation
import MailslotAudit
import MailslotTestSupport
import MailslotWire
import Testing
@testable import MailslotRelay

/// The push stand-ins `tools/push run` starts (tools/push-standins/standins.py): where they listen,
/// the relay settings that point every provider at them, and their control and log routes. Absent
/// (nil ``current``) without MAILSLOT_TEST_PUSH_DIR: the suites that need them skip, saying why.
struct PushStandins: Sendable {
    static let skipReason = Comment(rawValue: "MAILSLOT_TEST_PUSH_DIR is not set: run the tests under tools/push run")
    static let current: PushStandins? = ProcessInfo.processInfo.environment["MAILSLOT_TEST_PUSH_DIR"].flatMap { try? PushStandins(folder: $0) }
    static var available: Bool { current != nil }

    /// The folder tools/push made (keys, CA, ports.json).
    let folder: String
    /// Each stand-in's port: webpush, webpush_tls, apns, apns_sandbox, fcm, webhook, control.
    let ports: [String: Int]
    /// The relay's settings for all four providers, as `serve` flags without the dashes, in order.
    let arguments: [(flag: String, value: String)]
    /// The control port's client.
    let control: AuditHTTP

    init(folder: String) throws {
        self.folder = folder
        let portData = try Data(contentsOf: URL(fileURLWithPath: folder + "/ports.json"))
        ports = try JSONDecoder().decode([String: Int].self, from: portData)
        let list = try JSONDecoder().decode([String].self, from: Data(contentsOf: URL(fileURLWithPath: folder + "/relay-arguments.json")))
        var pairs: [(String, String)] = []
        var index = 0
        while index + 1 < list.count {
            pairs.append((String(list[index].dropFirst(2)), list[index + 1]))
            index += 2
        }
        arguments = pairs
        control = AuditHTTP(base: URL(string: "http://127.0.0.1:\(ports["control"] ?? 0)")!)
    }

    /// Applies the stand-ins' settings, then `extra` (e.g. `push-wake-interval`), through the one
    /// settings table `serve` uses; `without` leaves flags out (the SSRF case drops the allowance).
    func configure(_ configuration: inout RelayConfiguration, extra: [String: String] = ["push-wake-interval": "5"],
                   without: Set<String> = []) throws {
        let settings = Dictionary(uniqueKeysWithValues: RelayConfiguration.settings.map { ($0.flag, $0) })
        for (flag, value) in arguments.filter({ !without.contains($0.flag) }) + extra.sorted(by: { $0.key < $1.key }).map({ ($0.key, $0.value) }) {
            if let setting = settings[flag] {
                try setting.apply(&configuration, value)
            } else {
                try Self.set(flag, value, in: &configuration.push)
            }
        }
    }

    /// The design §6 settings straight into ``PushSettings``, for a build whose settings table
    /// does not have them (yet): the same values `serve` would set.
    static func set(_ flag: String, _ value: String, in push: inout PushSettings) throws {
        func number(_ text: String) throws -> Int {
            guard let number = Int(text) else { throw TestRelayError("--\(flag) takes a number: \(text)") }
            return number
        }
        switch flag {
        case "push-wake-interval": push.wakeInterval = try number(value)
        case "max-push-registrations": push.maxRegistrations = try number(value)
        case "push-concurrency": push.concurrency = try number(value)
        case "push-timeout": push.timeout = try number(value)
        case "push-allow-private-addresses": push.allowPrivateAddresses = value == "true"
        case "push-ca-file": push.caFile = value
        case "vapid-key": push.webPush.keyFile = value
        case "vapid-subject": push.webPush.subject = value
        case "apns-key": push.apns.keyFile = value
        case "apns-key-id": push.apns.keyID = value
        case "apns-team-id": push.apns.teamID = value
        case "apns-topic": push.apns.topic = value
        case "apns-url": push.apns.url = value
        case "apns-sandbox-url": push.apns.sandboxURL = value
        case "fcm-service-account": push.fcm.serviceAccountFile = value
        case "fcm-url": push.fcm.url = value
        case "fcm-token-url": push.fcm.tokenURL = value
        case "webhook-url": push.webhook.url = value
        case "webhook-secret-file": push.webhook.secretFile = value
        default: throw TestRelayError("the relay has no setting --\(flag) (docs/design/wakeups.md §6)")
        }
    }

    /// The same settings as `serve` arguments, for a relay process.
    /// `--push-allow-private-addresses` is a switch on `serve`'s command line (its variable takes
    /// `true`/`false`): given alone when on.
    func serveArguments(extra: [String: String] = ["push-wake-interval": "5"]) -> [String] {
        (arguments.map { ($0.flag, $0.value) } + extra.sorted(by: { $0.key < $1.key }).map { ($0.key, $0.value) })
            .flatMap { flag, value -> [String] in
                if flag == "push-allow-private-addresses" { return value == "true" ? ["--\(flag)"] : [] }
                return ["--\(flag)", value]
            }
    }

    /// Sends a control command to stand-in `name` (webpush, apns, oauth, fcm, webhook).
    func command(_ name: String, _ body: [String: Any]) async throws {
        let answer = try await control.call("POST", "/\(name)/_control", body: body)
        guard answer.status == 200 else { throw TestRelayError("control \(name): \(answer.status) \(answer.text)") }
    }

    /// Empties every stand-in's queue, log and counters.
    func reset() async throws {
        let answer = try await control.call("POST", "/_reset")
        guard answer.status == 200 else { throw TestRelayError("reset: \(answer.status)") }
    }

    /// Stand-in `name`'s log, oldest first.
    func log(_ name: String) async throws -> [PushLogEntry] {
        let answer = try await control.call("GET", "/\(name)/_log")
        return answer.text.split(separator: "\n").compactMap { line in
            (try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]).map(PushLogEntry.init)
        }
    }

    /// Stand-in `name`'s counters (requests, hanging, max_hanging, …).
    func state(_ name: String) async throws -> [String: Int] {
        let answer = try await control.call("GET", "/\(name)/_state")
        return (answer.json as? [String: Int]) ?? [:]
    }

    /// A new Web Push subscription at the receiver: the members a browser's `toJSON()` gives.
    func subscribe(tls: Bool = false, host: String = "127.0.0.1") async throws -> WebPushSubscription {
        let answer = try await control.call("POST", "/webpush/_subscribe", body: ["tls": tls, "host": host])
        let json = answer.json
        guard let id = json["id"] as? String, let endpoint = json["endpoint"] as? String, let p256dh = json["p256dh"] as? String,
              let auth = json["auth"] as? String else { throw TestRelayError("subscribe: \(answer.status) \(answer.text)") }
        return WebPushSubscription(id: id, endpoint: endpoint, p256dh: p256dh, auth: auth)
    }
}

/// A test subscription at the Web Push stand-in.
struct WebPushSubscription: Sendable {
    let id: String, endpoint: String, p256dh: String, auth: String
}

/// One request a stand-in received, as its log says: whether every check passed, the answer, the
/// tag it carried (decrypted, for Web Push), and what it was addressed to.
struct PushLogEntry: Sendable, CustomStringConvertible {
    let ok: Bool
    let status: Int?
    let tag: String?
    /// Web Push: the subscription id; APNs, FCM: the device token; webhook: the registration id.
    let target: String?
    let time: Double
    let why: String?
    let hung: Bool
    let followedRedirect: Bool
    let sandbox: Bool
    let webhookID: String?
    let signedBy: [Int]
    let claims: [String: String]

    init(_ json: [String: Any]) {
        ok = json["ok"] as? Bool ?? false
        status = json["status"] as? Int
        tag = json["tag"] as? String
        target = (json["subscription"] as? String) ?? (json["token"] as? String)
            ?? ((json["body"] as? [String: Any])?["registration"] as? String)
        time = json["time"] as? Double ?? 0
        why = json["why"] as? String
        hung = json["hung"] as? Bool ?? false
        followedRedirect = json["followed_redirect"] as? Bool ?? false
        sandbox = json["sandbox"] as? Bool ?? false
        webhookID = json["webhook_id"] as? String
        signedBy = json["signed_by"] as? [Int] ?? []
        claims = (json["claims"] as? [String: Any] ?? [:]).mapValues { "\($0)" }
    }

    var description: String { "\(ok ? "ok" : "refused") \(status.map(String.init) ?? "-") tag=\(tag ?? "nil") \(why ?? "")" }
}

/// A registration's request body per provider, and what the stand-in's log calls its target.
enum PushCase: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case webpush, apns, fcm, webhook

    var testDescription: String { rawValue }

    /// The stand-in whose log shows this provider's calls.
    var standin: String { rawValue }
}

/// A new registration id as the client library makes them (22 characters of 16 random bytes).
func newRegistrationID() -> String { Base64URL.encode(randomBytes(16)) }

/// A new random tag (22 characters), as the client library makes them per account.
func newTag() -> String { Base64URL.encode(randomBytes(16)) }

extension TestRelay {
    /// Registers a target of `kind` for `uid` (at the stand-ins); returns the registration id, the
    /// tag and what the stand-in's log will name as its target.
    func registerPush(_ kind: PushCase, uid: String, session: String, standins: PushStandins, tag: String = newTag(),
                      subscription: WebPushSubscription? = nil, sandbox: Bool = false) async throws -> (id: String, tag: String, target: String) {
        let id = newRegistrationID()
        var body: [String: Any] = ["provider": kind.rawValue, "tag": tag]
        let target: String
        switch kind {
        case .webpush:
            let sub = if let subscription { subscription } else { try await standins.subscribe() }
            body["endpoint"] = sub.endpoint
            body["p256dh"] = sub.p256dh
            body["auth"] = sub.auth
            target = sub.id
        case .apns:
            target = randomBytes(32).map { String(format: "%02x", $0) }.joined()
            body["token"] = target
            if sandbox { body["sandbox"] = true }
        case .fcm:
            target = "fcm:" + Base64URL.encode(randomBytes(24))
            body["token"] = target
        case .webhook:
            body["token"] = "device-" + Base64URL.encode(randomBytes(8))
            target = id
        }
        let answer = try await call("PUT", "/v1/users/\(uid)/push/\(id)", session: session, body: body)
        guard answer.status == 201 else { throw TestRelayError("registering \(kind) for \(uid): \(answer.summary) \(answer.text)") }
        return (id, tag, target)
    }

    /// The ids `GET /v1/users/{uid}/push` lists.
    func pushRegistrationIDs(uid: String, session: String) async throws -> [String] {
        let answer = try await call("GET", "/v1/users/\(uid)/push", session: session)
        guard answer.status == 200 else { throw TestRelayError("listing \(uid)'s registrations: \(answer.summary)") }
        return ((answer.json["registrations"] as? [[String: Any]]) ?? []).compactMap { $0["id"] as? String }
    }

    /// Creates a message for `recipient`, with `wake` when given (absent: the default, true).
    @discardableResult
    func sendMessage(_ session: String, to recipient: String, wake: Bool? = nil) async throws -> Answer {
        var body: [String: Any] = ["envelope": Base64URL.encode(randomBytes(512))]
        if let wake { body["wake"] = wake }
        let answer = try await call("PUT", "/v1/users/\(recipient)/messages/\(MessageID.generate())", session: session, body: body)
        guard answer.status == 201 else { throw TestRelayError("send to \(recipient): \(answer.summary) \(answer.text)") }
        return answer
    }
}

extension PushStandins {
    /// The requests stand-in `kind` received for `target`.
    func requests(_ kind: PushCase, for target: String) async throws -> [PushLogEntry] {
        try await log(kind.standin).filter { $0.target == target }
    }

    /// Waits until `target` has received `count` requests, and returns them.
    func awaitRequests(_ kind: PushCase, for target: String, count: Int = 1, within: Duration = .seconds(20),
                       sourceLocation: SourceLocation = #_sourceLocation) async throws -> [PushLogEntry] {
        try await eventually(within: within, "\(count) \(kind) request(s) for the registration", sourceLocation: sourceLocation) {
            try await requests(kind, for: target).count >= count
        }
        return try await requests(kind, for: target)
    }

}

extension TestRelay {
    /// Checks the coalescing decision rather than watching for a call that must not come: waits
    /// until the relay has sent a wake-up and has no call in flight, then asks the store for the
    /// earliest pending wake-up. Any left (the later messages' one) must be due no earlier than
    /// an interval (`interval` ms) after the earliest `woken_at` of `uids`' registrations: none
    /// is due now, so none follows.
    /// With `waitForSend` false the caller has waited for the send itself (on two relays, either sends).
    func expectNoWakeUpDueBeforeTheInterval(_ uids: [String], interval: Int64, waitForSend: Bool = true,
                                            sourceLocation: SourceLocation = #_sourceLocation) async throws {
        if waitForSend {
            try await eventually("a wake-up was sent and no call is in flight", sourceLocation: sourceLocation) {
                sum("mailslot_push_sent_total", labelsContaining: []) >= 1 && counter("mailslot_push_in_flight") == 0
            }
        }
        var woken: [Int64] = []
        for uid in uids { woken += try await relay.store.registrations(uid: uid).map(\.wokenAt).filter { $0 > 0 } }
        let earliest = try #require(woken.min(), "a registration was woken", sourceLocation: sourceLocation)
        // On PostgreSQL a create that raced the claim may have queued a row due at once; the next
        // claim (within the 1 s tick) puts it back to the interval's end instead of sending it,
        // which the callers' sent counts check. So: eventually, nothing is due before the interval.
        try await eventually("the next wake-up waits for the interval", sourceLocation: sourceLocation) {
            guard let due = try await relay.store.nextWakeupDue() else { return true }
            return due >= earliest + interval
        }
    }

    /// Waits until the relay's claims skipped a wake-up for `reason` more than `before` times:
    /// the relay has decided not to send it, so its absence can be asserted now.
    func awaitSkipped(_ reason: String, above before: Double = 0, within: Duration = .seconds(20),
                      sourceLocation: SourceLocation = #_sourceLocation) async throws {
        try await eventually(within: within, "a wake-up skipped (\(reason))", sourceLocation: sourceLocation) {
            sum("mailslot_push_skipped_total", labelsContaining: ["\"\(reason)\""]) > before
        }
    }
}
