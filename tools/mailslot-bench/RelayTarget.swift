import ArgumentParser
import Foundation
import MailslotWire

/// Which relay to measure: one the bench starts (`--spawn`), or one already running (`--relay URL`).
struct TargetOptions: ParsableArguments {
    @Flag(help: "Start mailslot-relay (the one next to this executable) on a temporary folder and a free loopback port; stop it and delete the folder at the end.")
    var spawn = false

    @Option(help: ArgumentHelp("A running relay to measure instead, e.g. http://127.0.0.1:8080.", valueName: "URL"))
    var relay: String?

    @Option(help: ArgumentHelp("With --relay: the file holding the relay's issuer secret key (one line, k4.secret.…), to mint sign-in tokens for throwaway users.", valueName: "FILE"))
    var issuerSecretKey: String?

    @Option(help: ArgumentHelp("The relay's audience id (the `aud` of the tokens).", valueName: "ID"))
    var audience: String = Defaults.audience

    @Option(help: ArgumentHelp("With --relay: the bearer token its GET /metrics wants, if any.", valueName: "TOKEN"))
    var metricsToken: String?

    @Option(help: ArgumentHelp("With --spawn: the relay executable (default: mailslot-relay next to this one).", valueName: "PATH"))
    var relayBinary: String?

    @Option(help: ArgumentHelp("With --spawn: the relay's --durability, normal or full (default: the relay's default).", valueName: "MODE"))
    var durability: String?

    func validate() throws {
        guard spawn != (relay != nil) else { throw ValidationError("give either --spawn or --relay URL") }
        if let relay {
            guard let url = URL(string: relay), let scheme = url.scheme, ["http", "https"].contains(scheme), url.host != nil else {
                throw ValidationError("--relay takes an http:// or https:// URL, e.g. http://127.0.0.1:8080")
            }
            guard issuerSecretKey != nil else {
                throw ValidationError("--relay needs --issuer-secret-key FILE: the bench signs in throwaway users with tokens it mints")
            }
            if relayBinary != nil || durability != nil { throw ValidationError("--relay-binary and --durability go with --spawn") }
        } else {
            if issuerSecretKey != nil { throw ValidationError("--issuer-secret-key goes with --relay (a spawned relay gets a fresh key)") }
            if metricsToken != nil { throw ValidationError("--metrics-token goes with --relay (a spawned relay serves /metrics on loopback without one)") }
        }
        if let durability, !["normal", "full"].contains(durability) {
            throw ValidationError("--durability is normal or full")
        }
        guard !audience.isEmpty, audience.utf8.count <= CustomToken.maxClaimBytes else {
            throw ValidationError("--audience must be 1 to \(CustomToken.maxClaimBytes) bytes")
        }
    }
}

/// The relay under test and what the bench can learn about it: a spawned one through `/proc`,
/// a remote one through `/metrics` when it serves the standard process metrics.
final class RelayTarget: Sendable {
    let http: RelayHTTP
    let issuer: TokenIssuer
    /// Set when the bench started the relay.
    let spawned: SpawnedRelay?
    private let metricsToken: String?

    private init(http: RelayHTTP, issuer: TokenIssuer, spawned: SpawnedRelay?, metricsToken: String?) {
        self.http = http
        self.issuer = issuer
        self.spawned = spawned
        self.metricsToken = metricsToken
    }

    /// Starts (or reaches) the relay and waits until it answers `/healthz`.
    static func start(_ options: TargetOptions, maxEnvelopeBytes: Int?) async throws -> RelayTarget {
        if options.spawn {
            return try await spawn(binary: options.relayBinary, durability: options.durability, audience: options.audience,
                                   maxEnvelopeBytes: maxEnvelopeBytes)
        }
        let key = try readIssuerKey(options.issuerSecretKey ?? "")
        let target = RelayTarget(http: RelayHTTP(base: options.relay ?? ""), issuer: TokenIssuer(key: key, audience: options.audience),
                                 spawned: nil, metricsToken: options.metricsToken)
        guard await target.http.healthy() else {
            throw BenchFailure.unreachable("the relay at \(target.http.base) does not answer GET /healthz with 200")
        }
        return target
    }

    /// Starts a relay of its own (``SpawnedRelay``) with a fresh issuer key, and waits until it answers.
    static func spawn(binary: String?, durability: String?, audience: String, maxEnvelopeBytes: Int?) async throws -> RelayTarget {
        let executable = try SpawnedRelay.locateBinary(binary)
        let key = IdentityKeyPair()
        let relay = try SpawnedRelay(binary: executable, issuerPublicKey: key.publicKey.paserk, audience: audience,
                                     durability: durability, maxEnvelopeBytes: maxEnvelopeBytes)
        let target = RelayTarget(http: RelayHTTP(base: "http://127.0.0.1:\(relay.port)"),
                                 issuer: TokenIssuer(key: key, audience: audience), spawned: relay, metricsToken: nil)
        do {
            try relay.start()
            try await relay.waitHealthy(target.http)
        } catch {
            await target.finish()
            throw error
        }
        return target
    }

    /// A line for the report: where the relay is.
    var description: String {
        if let spawned { return "spawned \(spawned.binary.lastPathComponent) on 127.0.0.1:\(spawned.port)" }
        return http.base
    }

    /// Its resident set size now, in bytes.
    func residentBytes() async -> Int? {
        if let spawned { return spawned.pid.flatMap(ProcessStats.residentBytes(pid:)) }
        return await metrics()?["process_resident_memory_bytes"].map { Int($0) }
    }

    /// Its peak resident set size, in bytes: `VmHWM`, or the metric, or the current size as a lower bound.
    func peakResidentBytes() async -> Int? {
        if let spawned { return spawned.pid.flatMap(ProcessStats.peakResidentBytes(pid:)) }
        guard let sample = await metrics() else { return nil }
        return (sample["process_max_resident_memory_bytes"] ?? sample["process_resident_memory_bytes"]).map { Int($0) }
    }

    /// Its CPU time so far, in seconds.
    func cpuSeconds() async -> Double? {
        if let spawned { return spawned.pid.flatMap(ProcessStats.cpuSeconds(pid:)) }
        return await metrics()?["process_cpu_seconds_total"]
    }

    /// `GET /metrics`, parsed; nil when not served.
    func metrics() async -> PrometheusText? { await http.metrics(token: metricsToken) }

    /// Stops a spawned relay and deletes its folder; nothing for a remote one.
    func finish() async {
        guard let spawned else { return }
        await spawned.stop()
        spawned.remove()
    }

    private static func readIssuerKey(_ path: String) throws -> IdentityKeyPair {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw BenchFailure.usage("cannot read the issuer secret key file '\(path)'")
        }
        var bytes = [UInt8](data)
        defer { wipe(&bytes) }
        guard bytes.count < 1024 else { throw BenchFailure.usage("'\(path)' is not an issuer secret key: expected one line k4.secret.…") }
        let text = String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        do { return try IdentityKeyPair(paserk: text) } catch {
            // Never echo the file: it holds a secret.
            throw BenchFailure.usage("'\(path)' is not an issuer secret key: expected one line k4.secret.… (PASERK)")
        }
    }
}
