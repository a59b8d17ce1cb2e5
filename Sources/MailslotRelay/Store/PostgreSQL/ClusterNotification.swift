import MailslotWire

/// The payload of the `NOTIFY`s relays send one another on channel ``channel`` (docs/architecture.md
/// "Across nodes"): who sent it, and a ``ClusterEvent``. Text, one of
///
///     m NODE\nUID\nUID…        messages stored in (or unsent from) these mailboxes
///     a NODE                   re-read every live subscription
///     s NODE GENERATION UID    a subscription to UID began with GENERATION
///     p NODE COUNT UID         a prekey claim left UID COUNT one-time prekeys, below the low-water mark
///
/// NODE is the sending process's random id (16 hex digits); UIDs follow spec/protocol.md's uid
/// grammar (no space, no newline). PostgreSQL refuses payloads of 8,000 bytes
/// or more: a change that would not fit becomes `a`.
struct ClusterNotification: Sendable, Equatable {
    /// The channel every node listens on.
    static let channel = "mailslot"
    /// The longest payload sent; PostgreSQL's limit is 8,000 bytes (less than that).
    static let maxPayloadBytes = 7_999

    let node: String
    let event: ClusterEvent

    /// The payload text, never longer than ``maxPayloadBytes``.
    var payload: String {
        switch event {
        case .changed(let mailboxes):
            let text = (["m \(node)"] + mailboxes).joined(separator: "\n")
            return text.utf8.count <= Self.maxPayloadBytes ? text : ClusterNotification(node: node, event: .recheckAll).payload
        case .recheckAll:
            return "a \(node)"
        case .subscribed(let mailbox, let generation):
            return "s \(node) \(generation) \(mailbox)"
        case .prekeysLow(let mailbox, let count):
            return "p \(node) \(count) \(mailbox)"
        }
    }

    /// The payloads that announce `mailboxes` from `node`: as many `m` payloads as it takes, each
    /// within ``maxPayloadBytes``, every mailbox in exactly one — so that a send to many's
    /// thousand mailboxes never become an `a` (every other relay re-reading every live
    /// subscription for one message). Empty for no mailboxes.
    static func changed(node: String, mailboxes: [String]) -> [String] {
        var payloads: [String] = []
        let head = "m \(node)"
        var current = head
        for mailbox in mailboxes {
            // A uid is at most 128 bytes: one always fits beside the head.
            if current != head, current.utf8.count + 1 + mailbox.utf8.count > maxPayloadBytes {
                payloads.append(current)
                current = head
            }
            current += "\n" + mailbox
        }
        if current != head { payloads.append(current) }
        return payloads
    }

    /// Reads a payload; nil for one this version does not understand (the listener then
    /// re-reads everything rather than guess).
    init?(payload: String) {
        let lines = payload.split(separator: "\n", omittingEmptySubsequences: false)
        let head = lines[0].split(separator: " ", omittingEmptySubsequences: false)
        guard head.count >= 2, Self.isNode(head[1]) else { return nil }
        let node = String(head[1])
        switch head[0] {
        case "m" where head.count == 2 && lines.count >= 2:
            let mailboxes = lines.dropFirst().map(String.init)
            guard mailboxes.allSatisfy(Self.isUID) else { return nil }
            self.init(node: node, event: .changed(mailboxes: mailboxes))
        case "a" where head.count == 2 && lines.count == 1:
            self.init(node: node, event: .recheckAll)
        case "s" where head.count == 4 && lines.count == 1:
            guard let generation = Int64(head[2]), generation > 0, String(generation) == head[2], Self.isUID(head[3]) else { return nil }
            self.init(node: node, event: .subscribed(mailbox: String(head[3]), generation: generation))
        case "p" where head.count == 4 && lines.count == 1:
            guard let count = Int(head[2]), count >= 0, String(count) == head[2], Self.isUID(head[3]) else { return nil }
            self.init(node: node, event: .prekeysLow(mailbox: String(head[3]), count: count))
        default:
            return nil
        }
    }

    /// A notification from `node`.
    init(node: String, event: ClusterEvent) {
        self.node = node
        self.event = event
    }

    /// A new random node id: 16 lowercase hex digits.
    static func newNode() -> String {
        String(UInt64.random(in: .min ... .max), radix: 16).leftPadded(to: 16)
    }

    private static func isNode(_ text: Substring) -> Bool {
        text.utf8.count == 16 && text.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
    }

    private static func isUID(_ text: some StringProtocol) -> Bool { Identifier.isValidUID(String(text)) }
}

private extension String {
    func leftPadded(to length: Int) -> String {
        String(repeating: "0", count: max(0, length - count)) + self
    }
}
