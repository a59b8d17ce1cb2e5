import Foundation
import GRDB
import MailslotWire

// Receiving group messages (docs/design/groups.md §3.3–§3.4). A group message is opened and
// stored held in the transaction that advances its ratchet (ClientStore.storeReceived), before
// the acknowledgement; then every held message is decided here, control messages first:
// changes are verified and folded, asks answered, answers' changes taken; other messages are
// shown (stored in the inbox with their group), held for a change this device has not seen, or
// refused and kept as rejected — from a non-member (`group_not_member`), for a group this user is
// out of (`group_left`).
extension MailslotClient {
    /// An author's identity key as this device trusts it, for verifying a signed change.
    enum AuthorKey: Sendable {
        case key(IdentityPublicKey)
        case changed
        case unknown
    }

    /// What deciding held messages came to: what to show, whom to ask, whom to answer.
    struct GroupDecisions: Sendable {
        var shown: [ReceivedMessage] = []
        var asks: [(group: GroupID, peer: String, from: UInt64)] = []
        var answers: [(group: GroupID, peer: String, from: UInt64)] = []
    }

    /// Decides every held group message that can be decided now, and sends the asks and answers
    /// that came of it (best effort: an ask that cannot go now is made again later). Returns the
    /// messages newly shown, oldest first.
    func decideGroupMessages(as me: Identity) async throws -> [ReceivedMessage] {
        var decisions = GroupDecisions()
        // Control messages first: a change and the message building on it may come in one page.
        let held = try await store.held().sorted { Self.isControl($0) && !Self.isControl($1) }
        for message in held {
            guard let chat = try? ChatMessage.decode(message.body), let reference = chat.group else {
                try await store.pool.write { db in
                    try ClientStore.rejectHeld(message.messageID, author: message.sender, groupID: message.groupID, reason: "envelope_invalid_body", db)
                }
                continue
            }
            // The authors whose signatures are checked: pinned (trust on first use) before the transaction.
            var keys: [String: AuthorKey] = [:]
            let authors = Set((chat.payload.groupChange.map { [$0] } ?? []) + (chat.payload.groupHistory?.changes ?? [])).map(\.author)
            for author in Set(authors) { keys[author] = await authorKey(author, me: me) }
            let received = ReceivedMessage(id: message.messageID, sender: message.sender, message: chat, body: message.body)
            let authorKeys = keys, uid = me.uid
            let step = try await store.pool.write { db in
                var step = GroupDecisions()
                try Self.decide(received, reference: reference, keys: authorKeys, me: uid, into: &step, db)
                return step
            }
            decisions.shown += step.shown
            decisions.asks += step.asks
            decisions.answers += step.answers
        }
        try await store.pool.write { db in
            for over in try ClientStore.heldOverBounds(db, now: Date().timeIntervalSince1970) {
                try ClientStore.rejectHeld(over.id, author: over.sender, groupID: over.groupID,
                                           reason: over.known ? "group_state_unknown" : "group_unknown", db)
            }
        }
        for ask in decisions.asks where try await store.mayAsk(ask.group.rawValue, peer: ask.peer) {
            await sendControl(.groupSync, payload: Payload(groupSync: GroupSync(from: ask.from)), group: ask.group, to: ask.peer, as: me)
        }
        for answer in decisions.answers { await answerSync(answer.group, peer: answer.peer, from: answer.from, as: me) }
        return decisions.shown
    }

    private static func isControl(_ held: ClientStore.HeldGroupMessage) -> Bool {
        guard let type = try? ChatMessage.decode(held.body).type else { return false }
        return type == .groupChange || type == .groupHistory
    }

    /// `uid`'s identity key as pinned here (pinned now when `uid` is new to this device, as for a
    /// first message: spec/groups.md §2.3 check 2).
    private func authorKey(_ uid: String, me: Identity) async -> AuthorKey {
        if uid == me.uid { return .key(me.signing.publicKey) }
        do { return .key(try await contact(uid).identityKey) } catch ClientError.keyChanged { return .changed } catch { return .unknown }
    }

    /// Verifies `change` of `group`, or says why it is refused (its code, spec/groups.md §2.3).
    private static func verify(_ change: GroupChange, group: GroupID, keys: [String: AuthorKey]) -> String? {
        let key: IdentityPublicKey?
        switch keys[change.author] ?? .unknown {
        case .key(let pinned): key = pinned
        case .changed: return GroupError.keyChanged.code
        case .unknown: key = nil
        }
        do { try change.verify(group: group, authorKey: key) } catch { return error.code }
        return nil
    }

    /// Decides one held message in the caller's transaction (docs/design/groups.md §3.3).
    static func decide(_ message: ReceivedMessage, reference: GroupReference, keys: [String: AuthorKey], me: String,
                       into decisions: inout GroupDecisions, _ db: Database) throws {
        let group = reference.id
        let id = message.id, sender = message.sender
        func reject(_ reason: String) throws {
            try ClientStore.rejectHeld(id, author: sender, groupID: group.rawValue, reason: reason, db)
        }
        switch message.message.type {
        case .groupChange:
            guard let change = message.message.payload.groupChange else { return try reject("envelope_invalid_body") }
            guard change.author == sender else { return try reject("group_author_mismatch") }
            if let refusal = verify(change, group: group, keys: keys) { return try reject(refusal) }
            switch try ClientStore.take(change, group: group, me: me, db) {
            case .unknownGroup:
                decisions.asks.append((group, sender, 0))  // stays held until the welcome comes
            case .duplicateGenesis:
                try reject(GroupError.duplicateGenesis.code)
            case .ignored:
                try ClientStore.unhold(id, db)
            case .taken(let missing):
                try ClientStore.unhold(id, db)
                if let missing { decisions.asks.append((group, sender, missing)) }
                try noteStateHash(reference, from: sender, into: &decisions, db)
                // Shown as events ("alice added dave"), in the inbox like any message: handed to
                // the app at least once, in order with the conversation.
                var shown = message
                let events = try ClientStore.groupEvents(of: message.message, db)
                shown.events = events
                shown.group = try events.first?.group ?? ClientStore.groupContext(of: message.message, db)
                try ClientStore.storeGroupMessage(shown, db)
                decisions.shown.append(shown)
            }
        case .groupSync:
            try ClientStore.unhold(id, db)
            guard let sync = message.message.payload.groupSync, let stored = try ClientStore.group(group.rawValue, db),
                  stored.status == .member, let state = try? GroupState.decode(stored.state) else { return }
            // Members are answered; former members (in some state this device had) learn the
            // change that removed them; anyone else gets nothing: no oracle for who is in a group.
            if state.isMember(sender) {
                decisions.answers.append((group, sender, sync.from))
            } else if try ClientStore.changes(of: group.rawValue, db).contains(where: {
                (try? GroupChange.decode($0.json))?.operations.remove?.contains(sender) ?? false
            }) {
                decisions.answers.append((group, sender, 0))
            }
        case .groupHistory:
            try ClientStore.unhold(id, db)
            guard let history = message.message.payload.groupHistory else { return }
            var missing: UInt64?
            for (index, change) in history.changes.sorted(by: { $0.version < $1.version }).enumerated() {
                // The first change of an answer to "I do not know this group" carries the base.
                let carried = index == 0 && change.base == nil && history.base != nil ? change.with(base: history.base) : change
                guard verify(carried, group: group, keys: keys) == nil else { continue }
                if case .taken(let gap) = try ClientStore.take(carried, group: group, me: me, db) { missing = gap }
            }
            if let missing { decisions.asks.append((group, sender, missing)) }
        default:
            try decideMessage(message, reference: reference, me: me, into: &decisions, db)
        }
    }

    /// An ordinary group message (text, file, receipt, …): shown, held or refused (§3.3 rules 3–7).
    private static func decideMessage(_ message: ReceivedMessage, reference: GroupReference, me: String,
                                      into decisions: inout GroupDecisions, _ db: Database) throws {
        let group = reference.id
        guard let stored = try ClientStore.group(group.rawValue, db), let state = try? GroupState.decode(stored.state) else {
            decisions.asks.append((group, message.sender, 0))  // rule 3: held until the welcome
            return
        }
        guard stored.status == .member else {  // rule 4
            return try ClientStore.rejectHeld(message.id, author: message.sender, groupID: group.rawValue, reason: "group_left", db)
        }
        if reference.version > stored.version {  // rule 5: behind, unless a change of that version waits past a gap
            let waiting = try Bool.fetchOne(db, sql: "SELECT 1 FROM group_changes WHERE group_id = ? AND version >= ?",
                                            arguments: [group.rawValue, Int64(reference.version)]) ?? false
            if !waiting {
                decisions.asks.append((group, message.sender, stored.version + 1))
                return
            }
        }
        guard state.isMember(message.sender) else {  // rule 6: the receiver's state decides
            return try ClientStore.rejectHeld(message.id, author: message.sender, groupID: group.rawValue, reason: "group_not_member", db)
        }
        try noteStateHash(reference, from: message.sender, into: &decisions, db)
        try ClientStore.unhold(message.id, db)
        var shown = message
        shown.group = GroupContext(id: group, name: state.name, version: reference.version)
        try ClientStore.storeGroupMessage(shown, db)
        decisions.shown.append(shown)
    }

    /// A sender naming a state hash this device never had at that version lacks a change, or
    /// this device does (§3.3): ask it for what it has from a little before, and offer it ours.
    private static func noteStateHash(_ reference: GroupReference, from sender: String, into decisions: inout GroupDecisions,
                                      _ db: Database) throws {
        guard let stored = try ClientStore.group(reference.id.rawValue, db), reference.version <= stored.version,
              try !ClientStore.hadState(reference.id.rawValue, version: reference.version, hash: reference.stateHash, db) else { return }
        let from = max(stored.origin, reference.version > 15 ? reference.version - 15 : 1)
        decisions.asks.append((reference.id, sender, from))
        decisions.answers.append((reference.id, sender, from))
    }

    /// Answers a `group_sync` (§3.4): this device's changes of versions ≥ `from`, ascending, at
    /// most 64 per message and 4 messages; for `from` 0 (the asker does not know the group) from
    /// the change that last added it, the first message carrying the state before that change.
    /// At most one answer per (group, peer) every 10 s (a former member: once a day).
    func answerSync(_ group: GroupID, peer: String, from: UInt64, as me: Identity) async {
        do {
            guard let stored = try await store.group(group.rawValue), let state = try? GroupState.decode(stored.state) else { return }
            let member = state.isMember(peer)
            guard try await store.mayAnswer(group.rawValue, peer: peer, interval: member ? 10 : 86_400) else { return }
            let all = try await store.changes(of: group.rawValue).compactMap { try? GroupChange.decode($0.json) }
            var changes = all
            var base: GroupState?
            if !member {
                // A former member learns the change that removed it, and nothing else.
                changes = all.filter { $0.operations.remove?.contains(peer) ?? false }.suffix(1).map { $0 }
            } else if from == 0 {
                guard let adding = all.last(where: { $0.operations.add?.contains(peer) ?? false }) else { return }
                changes = all.filter { $0.version >= adding.version }
                if !adding.isGenesis {
                    // The state the adding change built on, as this device folded it; a device that
                    // did not fold through it leaves the answer to another member.
                    guard let startJSON = stored.base, let start = try? GroupState.decode(startJSON) else { return }
                    base = GroupFold.fold(from: start, changes: all).states.first { $0.version == adding.version - 1 && $0.hash == adding.previous }
                    if base == nil { return }
                }
            } else {
                changes = changes.filter { $0.version >= from }
            }
            guard !changes.isEmpty else { return }
            for (index, chunk) in stride(from: 0, to: min(changes.count, 4 * GroupLimits.maxHistoryChanges), by: GroupLimits.maxHistoryChanges).enumerated() {
                let part = Array(changes[chunk..<min(changes.count, chunk + GroupLimits.maxHistoryChanges)])
                await sendControl(.groupHistory, payload: Payload(groupHistory: GroupHistory(changes: part, base: index == 0 ? base : nil)),
                                  group: group, to: peer, as: me)
            }
        } catch {
            logger.info("could not answer a group sync", metadata: ["group": "\(group)", "error": "\(Self.describe(error))"])
        }
    }
}

extension ClientStore {
    /// Stores a decided group message in the inbox with its group, and its files.
    static func storeGroupMessage(_ message: ReceivedMessage, _ db: Database) throws {
        try db.execute(sql: """
            INSERT OR IGNORE INTO inbox (id, sender, type, body, received_at, handled, group_id) VALUES (?, ?, ?, ?, ?, 0, ?)
            """, arguments: [message.id, message.sender, message.message.type.rawValue, Data(message.body), Date().timeIntervalSince1970,
                             message.group?.id.rawValue])
        if db.changesCount > 0 { try storeAttachments(of: message, db) }
    }
}
