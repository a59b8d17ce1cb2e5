import ArgumentParser
import Foundation
import MailslotWire

/// Which relays to measure: ones the bench starts (`--spawn`, `--nodes N`), or ones already
/// running (`--relay URL`, repeated for several nodes of one deployment).
struct TargetOptions: ParsableArguments {
    @Flag(help: "Start mailslot-relay (the one next to this executable) on a temporary folder and a free loopback port; stop it and delete the folder at the end.")
    var spawn = false

    @Option(help: ArgumentHelp("A running relay to measure instead, e.g. http://127.0.0.1:8080; repeat for several nodes sharing one database.", valueName: "URL"))
    var relay: [String] = []

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

    @OptionGroup var cluster: ClusterOptions

    @Option(help: ArgumentHelp("With --database-url: the PostgreSQL server's data folder (local server), to report its CPU and memory.", valueName: "DIR"))
    var pgdata: String?

    func validate() throws {
        guard spawn != !relay.isEmpty else { throw ValidationError("give either --spawn or --relay URL") }
        for relay in relay {
            guard let url = URL(string: relay), let scheme = url.scheme, ["http", "https"].contains(scheme), url.host != nil else {
                throw ValidationError("--relay takes an http:// or https:// URL, e.g. http://127.0.0.1:8080")
            }
        }
        if !relay.isEmpty {
            guard relay.count <= 64 else { throw ValidationError("give at most 64 --relay URLs") }
            guard issuerSecretKey != nil else {
                throw ValidationError("--relay needs --issuer-secret-key FILE: the bench signs in throwaway users with tokens it mints")
            }
            if relayBinary != nil || durability != nil { throw ValidationError("--relay-binary and --durability go with --spawn") }
            if cluster.nodes != 1 { throw ValidationError("--nodes goes with --spawn; with --relay, each URL is a node") }
            if cluster.postgres { throw ValidationError("--postgres goes with --spawn (it starts a database for the relays it starts)") }
        } else {
            if issuerSecretKey != nil { throw ValidationError("--issuer-secret-key goes with --relay (a spawned relay gets a fresh key)") }
            if metricsToken != nil { throw ValidationError("--metrics-token goes with --relay (a spawned relay serves /metrics on loopback without one)") }
        }
        if pgdata != nil && cluster.databaseURL == nil {
            throw ValidationError("--pgdata goes with --database-url (with --postgres the bench knows its cluster's folder)")
        }
        if let durability, !["normal", "full"].contains(durability) {
            throw ValidationError("--durability is normal or full")
        }
        guard !audience.isEmpty, audience.utf8.count <= CustomToken.maxClaimBytes else {
            throw ValidationError("--audience must be 1 to \(CustomToken.maxClaimBytes) bytes")
        }
    }
}

/// One relay process of the target: spawned (measured through `/proc`) or remote (through its
/// `/metrics`, when it serves the standard process metrics).
final class RelayNode: Sendable {
    let http: RelayHTTP
    /// Set when the bench started the relay.
    let spawned: SpawnedRelay?
    private let metricsToken: String?

    init(http: RelayHTTP, spawned: SpawnedRelay?, metricsToken: String?) {
        self.http = http
        self.spawned = spawned
        self.metricsToken = metricsToken
    }

    /// Where it is, for the report.
    var address: String { spawned.map { "127.0.0.1:\($0.port)" } ?? http.base }

    /// False once a spawned relay's process is gone (a remote one is assumed up).
    var isAlive: Bool {
        guard let spawned else { return true }
        guard let pid = spawned.pid else { return false }
        return kill(pid, 0) == 0
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
        if let spawned { return spawned.pid.flatMap { ProcessStats.cpuSeconds(pid: $0) } }
        return await metrics()?["process_cpu_seconds_total"]
    }

    /// `GET /metrics`, parsed; nil when not served.
    func metrics() async -> PrometheusText? { await http.metrics(token: metricsToken) }
}

/// The relays under test — one, or several nodes sharing a PostgreSQL database — and what the
/// bench can learn about them. Setup (sign-ins, key bundles, listings) goes to node 1; each
/// client connects to the node ``placement`` gives it.
final class RelayTarget: Sendable {
    let nodes: [RelayNode]
    let issuer: TokenIssuer
    let placement: Placement
    /// The shared database, when the nodes use PostgreSQL (nil: SQLite, or a remote relay's own affair).
    let database: DatabaseProbe?
    /// The cluster the bench started for the nodes (`--postgres`).
    let postgres: ThrowawayPostgres?

    private init(nodes: [RelayNode], issuer: TokenIssuer, placement: Placement, database: DatabaseProbe?, postgres: ThrowawayPostgres?) {
        self.nodes = nodes
        self.issuer = issuer
        self.placement = placement
        self.database = database
        self.postgres = postgres
    }

    /// Node 1's routes: where users sign in and the checks read.
    var http: RelayHTTP { nodes[0].http }

    /// Whether the bench started the relays.
    var isSpawned: Bool { nodes[0].spawned != nil }

    /// Several nodes, or one on PostgreSQL: the report adds each node and the database.
    var isCluster: Bool { nodes.count > 1 || database != nil }

    /// Every message in the store is this bench's (spawned relays on SQLite or on the bench's own
    /// cluster): the relay's pending gauge counts only ours.
    var ownsStore: Bool { isSpawned && (database == nil || postgres != nil) }

    /// The routes sender `index` connects to.
    func senderHTTP(_ index: Int) -> RelayHTTP { nodes[placement.senderNode(index, nodes: nodes.count)].http }
    /// The routes recipient `index` connects to (slow recipients numbered after the others).
    func recipientHTTP(_ index: Int) -> RelayHTTP { nodes[placement.recipientNode(index, nodes: nodes.count)].http }
    /// The routes idle subscriber `index` connects to.
    func idleHTTP(_ index: Int) -> RelayHTTP { nodes[placement.idleNode(index, nodes: nodes.count)].http }

    /// Starts (or reaches) the relays and waits until each answers `/healthz`.
    /// `extraArguments` go to spawned relays' `serve` (e.g. a larger `--max-file-bytes`).
    static func start(_ options: TargetOptions, maxEnvelopeBytes: Int?, extraArguments: [String] = []) async throws -> RelayTarget {
        if options.spawn {
            return try await spawn(binary: options.relayBinary, durability: options.durability, audience: options.audience,
                                   maxEnvelopeBytes: maxEnvelopeBytes, cluster: options.cluster, pgdata: options.pgdata,
                                   extraArguments: extraArguments)
        }
        let key = try readIssuerKey(options.issuerSecretKey ?? "")
        let nodes = options.relay.map { RelayNode(http: RelayHTTP(base: $0), spawned: nil, metricsToken: options.metricsToken) }
        let database = options.cluster.databaseURL.map { DatabaseProbe(url: $0, pgdata: options.pgdata) }
        let target = RelayTarget(nodes: nodes, issuer: TokenIssuer(key: key, audience: options.audience),
                                 placement: options.cluster.placement, database: database, postgres: nil)
        for node in nodes {
            guard await node.http.healthy() else {
                throw BenchFailure.unreachable("the relay at \(node.http.base) does not answer GET /healthz with 200")
            }
        }
        return target
    }

    /// Starts relays of its own (``SpawnedRelay``), one after the other (the first migrates a
    /// new database), with one fresh issuer key; with `cluster`'s database, or its own cluster.
    static func spawn(binary: String?, durability: String?, audience: String, maxEnvelopeBytes: Int?,
                      cluster: ClusterOptions, pgdata: String? = nil, extraArguments: [String] = []) async throws -> RelayTarget {
        let executable = try SpawnedRelay.locateBinary(binary)
        let script = cluster.postgres ? try ThrowawayPostgres.locateScript(cluster.postgresScript) : nil
        var postgres: ThrowawayPostgres?
        if let script { postgres = try await ThrowawayPostgres.start(script: script, fsync: !cluster.postgresNoFsync) }
        let databaseURL = postgres?.databaseURL ?? cluster.databaseURL
        let key = IdentityKeyPair()
        var nodes: [RelayNode] = []
        do {
            for _ in 0..<cluster.nodes {
                let relay = try SpawnedRelay(binary: executable, issuerPublicKey: key.publicKey.paserk, audience: audience,
                                             durability: durability, maxEnvelopeBytes: maxEnvelopeBytes, databaseURL: databaseURL,
                                             extraArguments: extraArguments)
                nodes.append(RelayNode(http: RelayHTTP(base: "http://127.0.0.1:\(relay.port)"), spawned: relay, metricsToken: nil))
                try relay.start()
                try await relay.waitHealthy(nodes[nodes.count - 1].http, timeout: databaseURL == nil ? 20 : 60)
            }
        } catch {
            for node in nodes {
                await node.spawned?.stop()
                node.spawned?.remove()
            }
            await postgres?.stop()
            throw error
        }
        let database = databaseURL.map { DatabaseProbe(url: $0, pgdata: postgres?.pgdata ?? pgdata) }
        return RelayTarget(nodes: nodes, issuer: TokenIssuer(key: key, audience: audience), placement: cluster.placement,
                           database: database, postgres: postgres)
    }

    /// A line for the report: where the relays are.
    var description: String {
        guard isCluster else {
            if let spawned = nodes[0].spawned { return "spawned \(spawned.binary.lastPathComponent) on 127.0.0.1:\(spawned.port)" }
            return http.base
        }
        let store = postgres != nil ? "a throwaway PostgreSQL cluster" : database != nil ? "one PostgreSQL database" : "one database"
        let which = isSpawned ? "spawned \(nodes[0].spawned!.binary.lastPathComponent) " : ""
        return "\(nodes.count) \(which)node\(nodes.count == 1 ? "" : "s") (\(nodes.map(\.address).joined(separator: ", "))) on \(store); "
            + placement.describe(nodes: nodes.count)
    }

    /// The relays' resident set size now, in bytes (summed over the nodes).
    func residentBytes() async -> Int? { await sum { await $0.residentBytes() } }

    /// The relays' peak resident set sizes, in bytes (summed over the nodes).
    func peakResidentBytes() async -> Int? { await sum { await $0.peakResidentBytes() } }

    /// The relays' CPU time so far, in seconds (summed over the nodes).
    func cpuSeconds() async -> Double? { await sum { await $0.cpuSeconds() } }

    /// Node 1's `GET /metrics`, parsed; nil when not served. (The store-wide gauges are the same on every node.)
    func metrics() async -> PrometheusText? { await nodes[0].metrics() }

    /// The first node whose spawned process has died, if any.
    var deadNode: (number: Int, node: RelayNode)? {
        nodes.enumerated().first { !$0.element.isAlive }.map { ($0.offset + 1, $0.element) }
    }

    /// Stops the spawned relays, deletes their folders, then stops a cluster of the bench's own.
    func finish() async {
        await withTaskGroup(of: Void.self) { group in
            for node in nodes { group.addTask { await node.spawned?.stop() } }
        }
        for node in nodes { node.spawned?.remove() }
        await postgres?.stop()
    }

    /// The sum of `value` over the nodes; nil if any node's is unknown.
    private func sum<Value: AdditiveArithmetic & Sendable>(_ value: (RelayNode) async -> Value?) async -> Value? {
        var total = Value.zero
        for node in nodes {
            guard let part = await value(node) else { return nil }
            total += part
        }
        return total
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
