import ArgumentParser
import Foundation
import MailslotClient
import MailslotWire

// `mailslot push`: this profile's wake-up registrations (spec/push.md, docs/design/wakeups.md
// §7.2). Each target added is kept in the profile, so that every later `mailslot login` (or
// sign-in after a session ran out) registers it again: the relay drops registrations with the
// sign-in that wrote them.

/// `mailslot push`: the group.
struct Push: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Wake-ups: register where the relay wakes this profile's device when a message waits and it is not connected.",
        discussion: """
            A wake-up carries nothing but a tag (random, per profile, or --tag): no sender, no content, no message id. \
            The relay wakes a registration at most once per interval (`mailslot push info`), never while this profile \
            listens, and not for typing indicators, receipts or `send --no-wake`.

            Exit codes: 64 bad arguments · 65 the relay refused the registration (invalid, endpoint refused, too many) \
            · 69 the relay does not send wake-ups through that provider · 75 the relay cannot be reached or asks to wait \
            (`push add` keeps the target: the next `mailslot login` registers it) · 77 not logged in.
            """,
        subcommands: [PushAdd.self, PushList.self, PushRemove.self, PushInfo.self])
}

/// `mailslot push add`: the providers.
struct PushAdd: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "add",
        abstract: "Register a push target (and keep it in the profile, registered again at each login). Prints its id.",
        discussion: "--json prints one object: id, provider, tag, created_at, updated_at, and the target's members as the relay gives them (endpoint; token, sandbox, mode).",
        subcommands: [PushAddWebPush.self, PushAddAPNs.self, PushAddFCM.self, PushAddWebhook.self])
}

/// What every `push add` takes.
struct PushAddOptions: ParsableArguments {
    @Option(help: ArgumentHelp("What the wake-ups carry (0 to 48 of A-Z a-z 0-9 _ -; default: this profile's random tag).", valueName: "T"))
    var tag: String?
    @Option(help: ArgumentHelp("The registration's id (16 to 64 of A-Z a-z 0-9 _ -): an id already registered is replaced. Default: a new random one.",
                               valueName: "ID"))
    var id: String?

    /// Registers `target` and prints the registration; the id is chosen here so that it can be
    /// printed even when the relay cannot be reached (the target is then kept for the next login).
    func register(_ target: DevicePushTarget, options: GlobalOptions) async throws {
        try await runPushCommand(adding: true) {
            if let id, !PushGrammar.isValidRegistrationID(id) { throw CLIError.usage("--id takes 16 to 64 of A-Z a-z 0-9 _ -") }
            if let tag, !PushGrammar.isValidTag(tag) { throw CLIError.usage("--tag takes 0 to 48 of A-Z a-z 0-9 _ -") }
            let chosen = id ?? Base64URL.encode(randomBytes(16))
            let client = try Profile(options).client()
            do {
                let registration = try await client.registerPush(target, id: chosen, tag: tag)
                try Output(json: options.json).emit(encoding: registration, text: registration.id)
            } catch let error where PushFailure.isTemporary(error) {
                Output(json: options.json).emit(["id": chosen, "provider": target.provider.rawValue, "state": "kept"], text: chosen)
                throw error
            }
        }
    }
}

/// `mailslot push add webpush`.
struct PushAddWebPush: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "webpush",
        abstract: "Register a Web Push subscription (a browser's, or a UnifiedPush distributor's endpoint).",
        discussion: "KEY and SECRET are unpadded base64url, as `PushSubscription.toJSON().keys` gives them. Subscribe with the relay's VAPID key (`mailslot push info`).")
    @OptionGroup var options: GlobalOptions
    @OptionGroup var add: PushAddOptions
    @Argument(help: "The subscription's endpoint URL (https://…).") var endpoint: String
    @Option(help: ArgumentHelp("The subscription's P-256 public key (65 bytes, base64url).", valueName: "KEY")) var p256dh: String
    @Option(help: ArgumentHelp("The subscription's authentication secret (16 bytes, base64url).", valueName: "SECRET")) var auth: String

    func run() async throws {
        guard let url = URL(string: endpoint), url.scheme != nil, url.host != nil else {
            throw ValidationError("'\(endpoint)' is not an absolute URL")
        }
        guard let key = Base64URL.decode(p256dh) else { throw ValidationError("--p256dh takes unpadded base64url") }
        guard let secret = Base64URL.decode(auth) else { throw ValidationError("--auth takes unpadded base64url") }
        try await add.register(.webPush(endpoint: url, p256dh: key, auth: secret), options: options)
    }
}

/// `mailslot push add apns`.
struct PushAddAPNs: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "apns", abstract: "Register an APNs device token (hex).")
    @OptionGroup var options: GlobalOptions
    @OptionGroup var add: PushAddOptions
    @Argument(help: "The device token in hexadecimal (64 to 200 digits).") var token: String
    @Flag(help: "The token is for Apple's development environment (a development build).") var sandbox = false
    @Flag(help: "Wake with a background push (content-available) instead of an alert for the Notification Service Extension.")
    var background = false

    func run() async throws {
        guard let bytes = Self.bytes(fromHex: token) else {
            throw ValidationError("an APNs token is an even number of hexadecimal digits")
        }
        try await add.register(.apns(deviceToken: bytes, sandbox: sandbox, mode: background ? .background : .alert), options: options)
    }

    /// The bytes of hexadecimal `text` (either case); nil for anything else.
    static func bytes(fromHex text: String) -> [UInt8]? {
        let digits = Array(text.utf8)
        guard !digits.isEmpty, digits.count.isMultiple(of: 2) else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(digits.count / 2)
        for index in stride(from: 0, to: digits.count, by: 2) {
            guard let byte = UInt8(String(decoding: digits[index...index + 1], as: UTF8.self), radix: 16) else { return nil }
            bytes.append(byte)
        }
        return bytes
    }
}

/// `mailslot push add fcm`.
struct PushAddFCM: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "fcm", abstract: "Register an FCM registration token.")
    @OptionGroup var options: GlobalOptions
    @OptionGroup var add: PushAddOptions
    @Argument(help: "The FCM registration token.") var token: String

    func run() async throws { try await add.register(.fcm(token: token), options: options) }
}

/// `mailslot push add webhook`.
struct PushAddWebhook: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "webhook",
        abstract: "Register for the operator's webhook (the relay POSTs a signed wake-up to the app's backend).",
        discussion: "The webhook's URL and secret are the operator's, configured on the relay; --token is whatever the backend needs to find this device.")
    @OptionGroup var options: GlobalOptions
    @OptionGroup var add: PushAddOptions
    @Option(help: ArgumentHelp("An opaque token for the backend (1 to 1 024 printable ASCII characters).", valueName: "T")) var token: String?

    func run() async throws { try await add.register(.webhook(token: token), options: options) }
}

/// `mailslot push list`.
struct PushList: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list",
        abstract: "List this account's push registrations on the relay (all its devices'), by id.",
        discussion: """
            One line each: ID, PROVIDER, TAG (- when empty), TARGET (a Web Push endpoint's host, or a token's first 8 \
            characters and …), WOKEN (when the last wake-up went, or -), tab-separated. A registration the push service \
            called dead is no longer listed.

            --json prints one object per registration, as the relay gives it: id, provider, tag, created_at, updated_at, \
            woken_at (absent until woken), endpoint (webpush), token, sandbox, mode (apns), token (fcm, webhook).
            """)
    @OptionGroup var options: GlobalOptions

    func run() async throws {
        try await runPushCommand {
            let output = Output(json: options.json)
            for registration in try await Profile(options).client().pushRegistrations() {
                try output.emit(encoding: registration, text: Self.line(registration))
            }
        }
    }

    /// A registration as a line for people; no token in full, no key.
    static func line(_ registration: PushRegistration) -> String {
        let target: String
        if let endpoint = registration.endpoint {
            target = URL(string: endpoint)?.host ?? "?"
        } else if let token = registration.token {
            target = token.count > 8 ? String(token.prefix(8)) + "…" : token
        } else {
            target = "-"
        }
        return [registration.id, registration.provider.rawValue, registration.tag.isEmpty ? "-" : registration.tag, target,
                registration.wokenAt ?? "-"].joined(separator: "\t")
    }
}

/// `mailslot push remove`.
struct PushRemove: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "remove",
        abstract: "Remove registration ID from the relay and from the profile (it is not registered again at login).",
        discussion: "Removing one the relay no longer has is not an error.\n\n--json prints one object: id, state (removed).")
    @OptionGroup var options: GlobalOptions
    @Argument(help: "The registration's id (`mailslot push list`).") var id: String

    func run() async throws {
        try await runPushCommand {
            guard PushGrammar.isValidRegistrationID(id) else { throw CLIError.usage("a registration id is 16 to 64 of A-Z a-z 0-9 _ -") }
            try await Profile(options).client().removePush(id: id)
            Output(json: options.json).emit(["id": id, "state": "removed"], text: "removed \(id)")
        }
    }
}

/// `mailslot push info`.
struct PushInfo: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "info",
        abstract: "Show what the relay does with wake-ups: its providers, its VAPID public key, the interval, the limit.",
        discussion: "--json prints one object: providers (names, sorted), vapid_public_key (base64url; only with Web Push), wake_interval_seconds, max_registrations.")
    @OptionGroup var options: GlobalOptions

    func run() async throws {
        try await runPushCommand {
            let configuration = try await Profile(options).client().pushConfiguration()
            let providers = configuration.providers.map(\.rawValue).sorted()
            let key = configuration.vapidPublicKey.map { Base64URL.encode($0) }
            let seconds = configuration.wakeInterval.components.seconds
            var fields: [String: Any] = ["providers": providers, "wake_interval_seconds": seconds,
                                         "max_registrations": configuration.maxRegistrations]
            if let key { fields["vapid_public_key"] = key }
            Output(json: options.json).emit(fields, text: """
                providers: \(providers.isEmpty ? "none (this relay sends no wake-ups)" : providers.joined(separator: ", "))
                vapid public key: \(key ?? "- (no Web Push)")
                wake interval: \(seconds) s
                max registrations: \(configuration.maxRegistrations)
                """)
        }
    }
}

/// How the push commands read a failure (docs/design/wakeups.md §7.2): a refused registration
/// is 65, a provider the relay does not have 69, a relay that cannot be reached or asks to wait
/// 75 — for `add`, the target is then kept and registered at the next login.
enum PushFailure {
    /// Whether `error` leaves a registration to be tried again: unreachable, 429, 5xx.
    static func isTemporary(_ error: any Error) -> Bool {
        switch error {
        case ClientError.unreachable: true
        case ClientError.relay(let problem): problem.code.status == 429 || problem.code.status >= 500
        default: false
        }
    }

    /// The CLI error for `error`; `adding`: said of a `push add`.
    static func cliError(_ error: any Error, adding: Bool) -> CLIError {
        if isTemporary(error) {
            let why = CLIError(error).description
            return .queued(adding ? "\(why); the target is kept in the profile and registered at the next `mailslot login`" : why)
        }
        switch error {
        case ClientError.pushProviderDisabled(let provider):
            return .unavailable("this relay does not send wake-ups through \(provider.rawValue) (push_provider_disabled): `mailslot push info` lists what it has")
        case ClientError.invalidPushTarget(let reason):
            return .usage(reason)
        case ClientError.relay(let problem) where [400, 409].contains(problem.code.status):
            return .refused("the relay refused: \(problem.code.rawValue)\(problem.detail.map { " — \($0)" } ?? "")")
        default:
            return CLIError(error)
        }
    }
}

/// Runs a push command's `body`: a failure becomes its message on stderr and its exit code, as
/// ``PushFailure`` reads it.
func runPushCommand(adding: Bool = false, _ body: () async throws -> Void) async throws {
    try await reportingFailures(as: { ($0 as? CLIError) ?? PushFailure.cliError($0, adding: adding) }, body)
}
