import ArgumentParser

/// Which relay node each client connects to.
enum Placement: String, ExpressibleByArgument, Sendable {
    /// Senders on nodes 1…⌊N/2⌋, recipients on the rest: every sender → recipient path crosses nodes.
    case split
    /// Every client on node 1; the other nodes share only the database.
    case first

    /// The node (0-based) of sender `index` among `nodes`.
    func senderNode(_ index: Int, nodes: Int) -> Int {
        guard self == .split, nodes > 1 else { return 0 }
        return index % (nodes / 2)
    }

    /// The node of recipient `index` (slow recipients count after the others).
    func recipientNode(_ index: Int, nodes: Int) -> Int {
        guard self == .split, nodes > 1 else { return 0 }
        let senderNodes = nodes / 2
        return senderNodes + index % (nodes - senderNodes)
    }

    /// The node of idle subscriber `index`: spread over all nodes, which carry them alike.
    func idleNode(_ index: Int, nodes: Int) -> Int {
        self == .split ? index % nodes : 0
    }

    /// What the report says about the clients' nodes.
    func describe(nodes: Int) -> String {
        guard nodes > 1 else { return "all clients on the one node" }
        switch self {
        case .first: return "all clients on node 1"
        case .split:
            let senderNodes = nodes / 2
            func range(_ from: Int, _ to: Int) -> String { from == to ? "node \(from)" : "nodes \(from)–\(to)" }
            return "senders on \(range(1, senderNodes)), recipients on \(range(senderNodes + 1, nodes))"
        }
    }
}
