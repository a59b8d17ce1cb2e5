import ArgumentParser
import Foundation

/// Several relay nodes on one PostgreSQL database (issue 17), for `run --spawn` and `crash`: how
/// many, which database, and where the clients connect.
struct ClusterOptions: ParsableArguments {
    @Option(help: ArgumentHelp("With --spawn: how many relays to start, each on its own port and data folder; more than 1 needs --postgres or --database-url (they share the database).", valueName: "N"))
    var nodes = 1

    @Flag(help: "Start a throwaway PostgreSQL cluster for the relays (tools/postgres start), and stop and delete it at the end.")
    var postgres = false

    @Flag(help: "With --postgres: the cluster runs with fsync=off (faster; safe while only processes die, not the machine).")
    var postgresNoFsync = false

    @Option(help: ArgumentHelp("With --postgres: the tools/postgres script (default: the project's, found above this executable or in the current folder).", valueName: "PATH"))
    var postgresScript: String?

    @Option(help: ArgumentHelp("An existing PostgreSQL database for every spawned relay (postgres://USER:PASSWORD@HOST:PORT/DATABASE); with --relay, only read for its commit count.", valueName: "URL"))
    var databaseURL: String?

    @Option(help: ArgumentHelp("split: senders on the first half of the nodes, recipients on the others, so every message crosses nodes; first: every client on node 1.", valueName: "HOW"))
    var placement: Placement = .split

    /// The most nodes: each relay keeps up to 16 database connections, and PostgreSQL allows 100
    /// by default (3 of them for superusers).
    static let maxNodes = 6

    /// Whether the relays use PostgreSQL.
    var usesDatabase: Bool { postgres || databaseURL != nil }

    func validate() throws {
        guard (1...Self.maxNodes).contains(nodes) else {
            throw ValidationError("--nodes must be 1 to \(Self.maxNodes) (each relay keeps up to 16 database connections; PostgreSQL allows 100 by default)")
        }
        if postgres && databaseURL != nil { throw ValidationError("give either --postgres or --database-url, not both") }
        if nodes > 1 && !usesDatabase {
            throw ValidationError("--nodes \(nodes) needs a database the relays share: --postgres or --database-url URL")
        }
        if !postgres && (postgresNoFsync || postgresScript != nil) {
            throw ValidationError("--postgres-no-fsync and --postgres-script go with --postgres")
        }
        if let databaseURL {
            guard let url = URLComponents(string: databaseURL), ["postgres", "postgresql"].contains(url.scheme?.lowercased() ?? ""),
                  url.host?.isEmpty == false, url.path.count > 1 else {
                // Never echo the URL: it holds a password.
                throw ValidationError("--database-url takes postgres://USER:PASSWORD@HOST:PORT/DATABASE")
            }
        }
    }
}
