import MailslotWire

/// One setting an operator gives `mailslot-relay serve`, as a flag or as an environment variable,
/// and how its text sets a ``RelayConfiguration``. ``RelayConfiguration/settings`` lists them all:
/// `serve` maps its flags through that table and nothing else, and the README's table is checked
/// against it.
public struct RelaySetting: Sendable {
    /// The option, without its dashes: `max-pending`.
    public let flag: String
    /// The variable read when the flag is absent: `MAILSLOT_MAX_PENDING`.
    public let variable: String
    /// The setting's value in a configuration, written as an operator writes it; nil when unset.
    public let value: @Sendable (RelayConfiguration) -> String?
    let apply: @Sendable (inout RelayConfiguration, String) throws -> Void

    /// A setting of text, checked by `apply` (which throws a sentence for the operator).
    init(_ flag: String, _ variable: String, value: @escaping @Sendable (RelayConfiguration) -> String?,
         apply: @escaping @Sendable (inout RelayConfiguration, String) throws -> Void) {
        self.flag = flag
        self.variable = variable
        self.value = value
        self.apply = apply
    }

    /// A number kept in `keyPath`, at least `minimum` and, when given, at most `maximum`.
    static func number<T: LosslessStringConvertible & Comparable & Sendable>(
        _ flag: String, _ variable: String, _ keyPath: WritableKeyPath<RelayConfiguration, T> & Sendable, atLeast minimum: T,
        atMost maximum: T? = nil
    ) -> RelaySetting {
        RelaySetting(flag, variable, value: { written($0[keyPath: keyPath]) }) { configuration, text in
            // Double reads "inf" and "nan" too; neither is a number of seconds or a rate.
            guard let value = T(text), (value as? Double)?.isFinite ?? true else {
                throw RelayConfigurationError("--\(flag) (\(variable)) takes a number, not '\(text)'")
            }
            if let maximum {
                guard value >= minimum, value <= maximum else {
                    throw RelayConfigurationError("--\(flag) (\(variable)) must be from \(written(minimum)) to \(written(maximum)), not '\(text)'")
                }
            }
            guard value >= minimum else { throw RelayConfigurationError("--\(flag) (\(variable)) must be at least \(written(minimum))") }
            configuration[keyPath: keyPath] = value
        }
    }

    /// Optional text kept in `keyPath` as given (a path, a URL, an id); ``RelayConfiguration/problems``
    /// checks it with the settings it goes with.
    static func text(_ flag: String, _ variable: String, _ keyPath: WritableKeyPath<RelayConfiguration, String?> & Sendable) -> RelaySetting {
        RelaySetting(flag, variable, value: { $0[keyPath: keyPath] }) { $0[keyPath: keyPath] = $1 }
    }

    /// Bytes (per second, for a rate) as an operator types them: `200000000`, `200MB`, `1.5GB`,
    /// `256MiB`, with an optional `/s`; decimal units are powers of ten, binary ones of two. Nil
    /// for anything else, a negative number or more than `Int64` holds.
    static func bytes(_ text: String) -> Int64? {
        var text = Substring(text)
        if text.hasSuffix("/s") { text = text.dropLast(2) }
        let units: [(String, Double)] = [("KiB", 0x400), ("MiB", 0x10_0000), ("GiB", 0x4000_0000), ("TiB", 0x100_0000_0000),
                                         ("kB", 1e3), ("KB", 1e3), ("MB", 1e6), ("GB", 1e9), ("TB", 1e12), ("B", 1)]
        guard let (suffix, factor) = units.first(where: { text.hasSuffix($0.0) }) else {
            return Int64(text).flatMap { $0 >= 0 ? $0 : nil }
        }
        let number = text.dropLast(suffix.count)
        guard !number.isEmpty, number.allSatisfy({ $0.isASCII && ($0.isNumber || $0 == ".") }), let value = Double(number) else { return nil }
        let bytes = (value * factor).rounded()
        guard bytes.isFinite, bytes < 9.2e18 else { return nil }
        return Int64(bytes)
    }

    /// `100` for 100.0: numbers as an operator types them.
    static func written<T: LosslessStringConvertible>(_ value: T) -> String {
        if let double = value as? Double, double == double.rounded(), abs(double) < 1e15 { return String(Int64(double)) }
        return String(value)
    }
}

extension RelayConfiguration {
    /// Every setting of `mailslot-relay serve`, in the order of the README's table. The minimums
    /// are those an operator may choose; ``problems`` then refuses what contradicts itself.
    public static let settings: [RelaySetting] = [
        RelaySetting("listen", "MAILSLOT_LISTEN", value: { $0.host.contains(":") ? "[\($0.host)]:\($0.port)" : "\($0.host):\($0.port)" }) {
            configuration, text in
            guard let colon = text.lastIndex(of: ":"), colon > text.startIndex, let port = Int(text[text.index(after: colon)...]),
                  (0...65535).contains(port) else {
                throw RelayConfigurationError("--listen (MAILSLOT_LISTEN) takes HOST:PORT, e.g. 127.0.0.1:8080 or [::1]:8080")
            }
            var host = text[..<colon]
            if host.hasPrefix("["), host.hasSuffix("]") { host = host.dropFirst().dropLast() }
            configuration.host = String(host)
            configuration.port = port
        },
        RelaySetting("data", "MAILSLOT_DATA", value: { $0.dataDirectory }) { $0.dataDirectory = $1 },
        RelaySetting("database-url", "MAILSLOT_DATABASE_URL", value: { $0.databaseURL }) { configuration, text in
            // Read now, so that a URL the store could not use stops `serve` before anything starts.
            _ = try PostgresURL.configuration(text)
            configuration.databaseURL = text
        },
        RelaySetting("issuer-public-key", "MAILSLOT_ISSUER_PUBLIC_KEY",
                     value: { $0.issuerKeys.isEmpty ? nil : $0.issuerKeys.map(\.paserk).joined(separator: ",") }) { configuration, text in
            // Several keys at once (a rotation): repeated flags, or a comma-separated variable.
            for key in text.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) where !key.isEmpty {
                do { configuration.issuerKeys.append(try IdentityPublicKey(paserk: key)) } catch {
                    throw RelayConfigurationError("--issuer-public-key (MAILSLOT_ISSUER_PUBLIC_KEY) takes PASERK k4.public.… keys (mailslot-relay keygen prints one)")
                }
            }
        },
        RelaySetting("audience", "MAILSLOT_AUDIENCE", value: { $0.audience }) { $0.audience = $1 },
        RelaySetting("durability", "MAILSLOT_DURABILITY", value: { $0.durability.rawValue }) { configuration, text in
            guard let durability = Durability(rawValue: text) else {
                throw RelayConfigurationError("--durability (MAILSLOT_DURABILITY) is normal or full, not '\(text)'")
            }
            configuration.durability = durability
        },
        RelaySetting("max-envelope-bytes", "MAILSLOT_MAX_ENVELOPE_BYTES", value: { String($0.maxEnvelopeBytes) }) { configuration, text in
            guard let value = Int(text), (Envelope.minimumSize...Envelope.maximumSize).contains(value), value & (value - 1) == 0 else {
                throw RelayConfigurationError("""
                    --max-envelope-bytes (MAILSLOT_MAX_ENVELOPE_BYTES) must be a power of two from \(Envelope.minimumSize) \
                    to \(Envelope.maximumSize) (an envelope size class), not '\(text)'
                    """)
            }
            configuration.maxEnvelopeBytes = value
        },
        .number("max-pending", "MAILSLOT_MAX_PENDING", \.maxPendingPerMailbox, atLeast: 1),
        .number("create-rate", "MAILSLOT_CREATE_RATE", \.createRate, atLeast: 0.01),
        .number("create-burst", "MAILSLOT_CREATE_BURST", \.createBurst, atLeast: 1),
        .number("max-batch-entries", "MAILSLOT_MAX_BATCH_ENTRIES", \.maxBatchEntries, atLeast: 1,
                atMost: RelayConfiguration.maxBatchEntriesLimit),
        .number("max-batch-bytes", "MAILSLOT_MAX_BATCH_BYTES", \.maxBatchBytes, atLeast: RelayConfiguration.minBatchBytes,
                atMost: RelayConfiguration.maxBatchBytesLimit),
        .number("max-prekeys", "MAILSLOT_MAX_PREKEYS", \.maxPrekeys, atLeast: 1),
        .number("prekey-claim-rate", "MAILSLOT_PREKEY_CLAIM_RATE", \.prekeyClaimRate, atLeast: 0.01),
        .number("prekey-claim-burst", "MAILSLOT_PREKEY_CLAIM_BURST", \.prekeyClaimBurst, atLeast: 1),
        .number("prekey-mailbox-rate", "MAILSLOT_PREKEY_MAILBOX_RATE", \.prekeyMailboxRate, atLeast: 0.01),
        .number("prekey-mailbox-burst", "MAILSLOT_PREKEY_MAILBOX_BURST", \.prekeyMailboxBurst, atLeast: 1),
        .number("relays", "MAILSLOT_RELAYS", \.relays, atLeast: 1, atMost: RelayConfiguration.maxRelays),
        .number("max-reads", "MAILSLOT_MAX_READS", \.maxReads, atLeast: 2),
        .number("window", "MAILSLOT_WINDOW", \.deliveryWindow, atLeast: 1),
        .number("max-connections", "MAILSLOT_MAX_CONNECTIONS", \.maxConnections, atLeast: 1),
        .number("header-timeout", "MAILSLOT_HEADER_TIMEOUT", \.headerTimeout, atLeast: 1),
        .number("idle-timeout", "MAILSLOT_IDLE_TIMEOUT", \.idleTimeout, atLeast: 1),
        .number("max-author-bytes", "MAILSLOT_MAX_AUTHOR_BYTES", \.maxAuthorBytes, atLeast: 1),
        .number("max-sessions-per-user", "MAILSLOT_MAX_SESSIONS_PER_USER", \.maxSessionFamilies, atLeast: 1),
        .number("min-free-bytes", "MAILSLOT_MIN_FREE_BYTES", \.minFreeBytes, atLeast: 0),
        .number("disk-reserve-bytes", "MAILSLOT_DISK_RESERVE_BYTES", \.reserveBytes, atLeast: 0),
        .number("session-ttl", "MAILSLOT_SESSION_TTL", \.sessionLifetime, atLeast: 60),
        .number("refresh-ttl", "MAILSLOT_REFRESH_TTL", \.refreshLifetime, atLeast: 60),
        .number("message-ttl", "MAILSLOT_MESSAGE_TTL", \.defaultMessageTTL, atLeast: 1),
        .number("max-message-ttl", "MAILSLOT_MAX_MESSAGE_TTL", \.maxMessageTTL, atLeast: 1),
        .number("max-document-bytes", "MAILSLOT_MAX_DOCUMENT_BYTES", \.maxDocumentBytes, atLeast: 2),
        .number("sweep-interval", "MAILSLOT_SWEEP_INTERVAL", \.sweepInterval, atLeast: 1),
        .number("max-file-bytes", "MAILSLOT_MAX_FILE_BYTES", \.maxFileBytes, atLeast: RelayConfiguration.minFileBytes,
                atMost: RelayConfiguration.maxFileBytesLimit),
        .number("max-author-blob-bytes", "MAILSLOT_MAX_AUTHOR_BLOB_BYTES", \.maxAuthorBlobBytes, atLeast: 1),
        .number("max-uploads-per-author", "MAILSLOT_MAX_UPLOADS_PER_AUTHOR", \.maxUploadsPerAuthor, atLeast: 1),
        .number("blob-part-bytes", "MAILSLOT_BLOB_PART_BYTES", \.blobPartBytes, atLeast: RelayConfiguration.minPartBytes,
                atMost: RelayConfiguration.maxPartBytes),
        .number("blob-upload-ttl", "MAILSLOT_BLOB_UPLOAD_TTL", \.blobUploadTTL, atLeast: 60),
        .number("max-blob-recipients", "MAILSLOT_MAX_BLOB_RECIPIENTS", \.maxBlobRecipients, atLeast: 1,
                atMost: RelayConfiguration.maxBlobRecipientsLimit),
        RelaySetting("max-transfer-rate", "MAILSLOT_MAX_TRANSFER_RATE", value: { String($0.maxTransferRate) }) { configuration, text in
            guard let rate = RelaySetting.bytes(text) else {
                throw RelayConfigurationError("--max-transfer-rate (MAILSLOT_MAX_TRANSFER_RATE) takes bytes per second, e.g. 200MB or 200000000 (0: no cap), not '\(text)'")
            }
            configuration.maxTransferRate = rate
        },
        RelaySetting("blob-store", "MAILSLOT_BLOB_STORE", value: {
            switch $0.blobStore {
            case .files: "files"
            case .s3(let text): text
            }
        }) { configuration, text in
            if text == "files" {
                configuration.blobStore = .files
                return
            }
            // Read now, so that a setting the store could not use stops `serve` before anything
            // starts; the error never echoes the text (it may hold credentials by mistake).
            do { _ = try S3Location(text) } catch {
                throw RelayConfigurationError("--blob-store (MAILSLOT_BLOB_STORE) is files or s3://BUCKET?endpoint=URL: \(error)")
            }
            configuration.blobStore = .s3(text)
        },
        RelaySetting("metrics-token", "MAILSLOT_METRICS_TOKEN", value: { $0.metricsToken }) { $0.metricsToken = $1 },
        // Wake-ups (spec/push.md, docs/operations.md "Wake-ups"): key files are paths, never contents.
        .number("push-wake-interval", "MAILSLOT_PUSH_WAKE_INTERVAL", \.push.wakeInterval, atLeast: PushSettings.wakeIntervalRange.lowerBound,
                atMost: PushSettings.wakeIntervalRange.upperBound),
        .number("max-push-registrations", "MAILSLOT_MAX_PUSH_REGISTRATIONS", \.push.maxRegistrations,
                atLeast: PushSettings.maxRegistrationsRange.lowerBound, atMost: PushSettings.maxRegistrationsRange.upperBound),
        .number("push-concurrency", "MAILSLOT_PUSH_CONCURRENCY", \.push.concurrency, atLeast: PushSettings.concurrencyRange.lowerBound,
                atMost: PushSettings.concurrencyRange.upperBound),
        .number("push-timeout", "MAILSLOT_PUSH_TIMEOUT", \.push.timeout, atLeast: PushSettings.timeoutRange.lowerBound,
                atMost: PushSettings.timeoutRange.upperBound),
        RelaySetting("push-allow-private-addresses", "MAILSLOT_PUSH_ALLOW_PRIVATE_ADDRESSES",
                     value: { $0.push.allowPrivateAddresses ? "true" : "false" }) { configuration, text in
            guard let value = Bool(text) else {
                throw RelayConfigurationError("--push-allow-private-addresses (MAILSLOT_PUSH_ALLOW_PRIVATE_ADDRESSES) is true or false, not '\(text)'")
            }
            configuration.push.allowPrivateAddresses = value
        },
        .text("push-ca-file", "MAILSLOT_PUSH_CA_FILE", \.push.caFile),
        .text("vapid-key", "MAILSLOT_VAPID_KEY", \.push.webPush.keyFile),
        .text("vapid-subject", "MAILSLOT_VAPID_SUBJECT", \.push.webPush.subject),
        .text("apns-key", "MAILSLOT_APNS_KEY", \.push.apns.keyFile),
        .text("apns-key-id", "MAILSLOT_APNS_KEY_ID", \.push.apns.keyID),
        .text("apns-team-id", "MAILSLOT_APNS_TEAM_ID", \.push.apns.teamID),
        .text("apns-topic", "MAILSLOT_APNS_TOPIC", \.push.apns.topic),
        RelaySetting("apns-url", "MAILSLOT_APNS_URL", value: { $0.push.apns.url }) { $0.push.apns.url = $1 },
        RelaySetting("apns-sandbox-url", "MAILSLOT_APNS_SANDBOX_URL", value: { $0.push.apns.sandboxURL }) { $0.push.apns.sandboxURL = $1 },
        .text("fcm-service-account", "MAILSLOT_FCM_SERVICE_ACCOUNT", \.push.fcm.serviceAccountFile),
        RelaySetting("fcm-url", "MAILSLOT_FCM_URL", value: { $0.push.fcm.url }) { $0.push.fcm.url = $1 },
        .text("fcm-token-url", "MAILSLOT_FCM_TOKEN_URL", \.push.fcm.tokenURL),
        .text("webhook-url", "MAILSLOT_WEBHOOK_URL", \.push.webhook.url),
        .text("webhook-secret-file", "MAILSLOT_WEBHOOK_SECRET_FILE", \.push.webhook.secretFile),
    ]

    /// The configuration an operator asked for: each setting from its flag's text in `flags` (keyed
    /// by ``RelaySetting/flag``), else from its variable in `environment` (an empty variable counts
    /// as unset), else its default. Throws the first setting whose text is wrong, then every
    /// ``problems`` of the whole. A flag no setting has is refused.
    ///
    /// ```swift
    /// let configuration = try RelayConfiguration(flags: ["listen": "127.0.0.1:9090", "durability": "full"],
    ///                                            environment: ProcessInfo.processInfo.environment)
    /// ```
    ///
    /// - Parameters:
    ///   - flags: Each option's text, keyed by its name without the dashes (`max-pending`).
    ///   - environment: The `MAILSLOT_*` variables, read for the settings `flags` leaves out.
    /// - Throws: ``RelayConfigurationError`` naming the first flag or variable whose text is wrong,
    ///   or an unknown flag, or every one of ``problems``.
    public init(flags: [String: String], environment: [String: String]) throws {
        self.init()
        if let unknown = Set(flags.keys).subtracting(Self.settings.map(\.flag)).sorted().first {
            throw RelayConfigurationError("there is no setting --\(unknown)")
        }
        for setting in Self.settings {
            guard let text = flags[setting.flag] ?? environment[setting.variable].flatMap({ $0.isEmpty ? nil : $0 }) else { continue }
            try setting.apply(&self, text)
        }
        // The development issuer key is `serve`'s to add, so a configuration without one is not
        // refused here; everything else must hold.
        let problems = problems.filter { $0 != Self.noIssuerKey }
        guard problems.isEmpty else { throw RelayConfigurationError(problems.joined(separator: " ")) }
    }
}
