import Foundation
import GRDB
import MailslotWire

// The group API (docs/design/groups.md §7.2; spec/groups.md). Groups live on the clients only:
// the relay sees, as for 1:1 messages, who sends to whom. Every change is signed by its author's
// identity key and sent to every member, old and new, through the pairwise sessions; every
// member folds the same changes into the same state, whatever order they came in.
extension MailslotClient {
    /// Creates a group named `name` with `members` (this user is added as its first admin) and
    /// sends its genesis to every member, each in its pairwise session.
    ///
    /// ```swift
    /// let trip = try await client.createGroup(name: "Trip", members: ["bob", "carol"])
    /// try await client.send(text: "see you at 8", toGroup: trip.id)
    /// ```
    ///
    /// - Parameters:
    ///   - name: 1–128 bytes of UTF-8, no control characters.
    ///   - members: The other members' uids (at most 999: a group has at most 1,000 members).
    /// - Returns: The group as created (version 1). Its genesis is in the outbox: members that
    ///   could not be reached get it on ``flush()``.
    /// - Throws: Before anything is stored: ``ClientError/invalidUID(text:)``,
    ///   ``ClientError/noKeys(uid:)`` (a member has no keys), ``ClientError/invalidGroup(code:)``
    ///   (the name), ``ClientError/groupTooLarge``, ``ClientError/notSignedIn``.
    public func createGroup(name: String, members: [String]) async throws -> ChatGroup {
        for uid in members where !Identifier.isValidUID(uid) { throw ClientError.invalidUID(text: uid) }
        let me = try await identity()
        // Keys first, like a send: a member with none fails the call before anything is stored.
        for uid in Set(members) where uid != me.uid {
            do { _ = try await contact(uid) } catch ClientError.keyChanged { continue }
        }
        let made: (change: GroupChange, state: GroupState)
        do { made = try GroupChange.genesis(name: name, creator: me.uid, members: members, key: me.signing) } catch { throw Self.clientError(error) }
        let group = made.state.id
        try await store.pool.write { db in
            _ = try ClientStore.take(made.change, group: group, me: me.uid, db)
        }
        let message = ChatMessage(type: .groupChange, sender: Sender(id: me.uid), payload: Payload(groupChange: made.change),
                                  timestamp: Int64(Date().timeIntervalSince1970 * 1000), group: GroupReference(made.state))
        _ = try await fanOut(message, to: made.state.members, group: group, as: me)
        return try await self.group(group)
    }

    /// Adds `uids` to `group` (admins only). The new members get the change with the group's
    /// state (`base`), and no history; everyone else gets the change.
    /// - Throws: ``ClientError/notGroupAdmin(_:)``, ``ClientError/groupChangeNotAllowed(reason:)``
    ///   (one is a member already), ``ClientError/groupTooLarge``, ``ClientError/noKeys(uid:)``,
    ///   ``ClientError/unknownGroup(_:)``, ``ClientError/notGroupMember(_:)``.
    @discardableResult
    public func addMembers(_ uids: [String], to group: GroupID) async throws -> GroupChangeOutcome {
        for uid in uids where !Identifier.isValidUID(uid) { throw ClientError.invalidUID(text: uid) }
        for uid in Set(uids) { do { _ = try await contact(uid) } catch ClientError.keyChanged { continue } }
        return try await change(group, GroupOperations(add: uids), adminOnly: true)
    }

    /// Removes `uids` from `group` (admins only; an admin only juniors). They get the change, and
    /// no group message after it from this device: their queued and held copies are dropped.
    @discardableResult
    public func removeMembers(_ uids: [String], from group: GroupID) async throws -> GroupChangeOutcome {
        try await change(group, GroupOperations(remove: uids), adminOnly: true)
    }

    /// Makes members `uids` admins of `group`, after every admin there is (admins only).
    @discardableResult
    public func promote(_ uids: [String], in group: GroupID) async throws -> GroupChangeOutcome {
        try await change(group, GroupOperations(promote: uids), adminOnly: true)
    }

    /// Makes admins `uids` plain members of `group` again (admins only, juniors only).
    @discardableResult
    public func demote(_ uids: [String], in group: GroupID) async throws -> GroupChangeOutcome {
        try await change(group, GroupOperations(demote: uids), adminOnly: true)
    }

    /// Renames `group` (admins only).
    @discardableResult
    public func rename(_ group: GroupID, to name: String) async throws -> GroupChangeOutcome {
        try await change(group, GroupOperations(name: name), adminOnly: true)
    }

    /// Leaves `group`. The last admin names a successor (by default the remaining member with
    /// the smallest uid), so that the group keeps an admin.
    @discardableResult
    public func leave(_ group: GroupID, successor: String? = nil) async throws -> GroupChangeOutcome {
        let me = try await identity()
        let state = try await memberState(group, me: me.uid)
        var operations = GroupOperations.leave(me.uid)
        if state.admins == [me.uid], let next = successor ?? state.members.first(where: { $0 != me.uid }) {
            operations = GroupOperations(remove: [me.uid], promote: [next])
        } else if let successor {
            operations = GroupOperations(remove: [me.uid], promote: [successor])
        }
        return try await change(group, operations, adminOnly: false)
    }

    /// The groups this device knows, members' and left ones (with their status), by name.
    public func groups() async throws -> [ChatGroup] {
        let me = try await identity()
        return try await store.pool.read { db in
            try String.fetchAll(db, sql: "SELECT id FROM groups").compactMap { try ClientStore.chatGroup($0, me: me.uid, db) }
        }.sorted { ($0.name, $0.id) < ($1.name, $1.id) }
    }

    /// Group `id` as this device folded it.
    /// - Throws: ``ClientError/unknownGroup(_:)``.
    public func group(_ id: GroupID) async throws -> ChatGroup {
        let me = try await identity()
        guard let group = try await store.pool.read({ db in try ClientStore.chatGroup(id.rawValue, me: me.uid, db) }) else {
            throw ClientError.unknownGroup(id)
        }
        return group
    }

    /// Group `id`'s members' uids, sorted.
    public func members(of group: GroupID) async throws -> [String] { try await self.group(group).members }

    /// Sends a message to every member of `group`: one id, each copy sealed in the pairwise
    /// session with its member, the members' copies stored in one transaction.
    ///
    /// ```swift
    /// let outcome = try await client.send(text: "hello all", toGroup: trip.id)
    /// for (member, copy) in outcome.copies { if case .held = copy { askToCompare(member) } }
    /// ```
    ///
    /// - Returns: Each member's copy's outcome (``GroupSendOutcome``). A member whose identity
    ///   key changed gets its copy once trusted; the others go at once.
    /// Two kinds go to fewer members, by themselves (spec/groups.md §4.5):
    /// - a **receipt** (type `receipt`) goes to the authors of the messages it names only, never
    ///   to the group: one receipt per author, naming only that author's messages, each with the
    ///   group set so that the author knows which conversation it is about. The outcome's copies
    ///   are by author (its `messageID` the first author's receipt's, in uid order);
    /// - a **typing** indicator (type `typing`) goes only to groups of at most 32 members, and
    ///   at most one `active: true` per 5 s per group (spec/groups.md §4.5): one within 5 s of the
    ///   last this client sent to `group` is not sent, and the outcome has no copies and an empty
    ///   `messageID` — no error, since the members still show the one sent before. An `active:
    ///   false` always goes.
    ///
    /// - Throws: Only when nothing was stored: ``ClientError/unknownGroup(_:)``,
    ///   ``ClientError/notGroupMember(_:)`` (removed, or left), ``ClientError/cannotSeal(code:)``,
    ///   ``ClientError/groupTooLargeForTyping(members:)``, ``ClientError/unknownGroupMessage(id:)``
    ///   (a receipt naming a message not received in this group).
    @discardableResult
    public func send(_ payload: Payload, type: MessageType = .text, toGroup group: GroupID, name: String? = nil) async throws -> GroupSendOutcome {
        let me = try await identity()
        let state = try await memberState(group, me: me.uid)
        let reference = GroupReference(state)
        let timestamp = Int64(Date().timeIntervalSince1970 * 1000)
        if type == .typing, state.members.count > Self.maxTypingGroupMembers {
            throw ClientError.groupTooLargeForTyping(members: state.members.count)
        }
        if type == .receipt, let receipt = payload.receipt {
            return try await sendReceipt(receipt, payload: payload, group: group, reference: reference, timestamp: timestamp, name: name, as: me)
        }
        // The typing rate: counted when admitted (no suspension between the check and the count,
        // so two sends at once cannot both pass), given back when nothing could be stored.
        var typingAdmitted: ContinuousClock.Instant?
        if type == .typing, payload.typing?.active == true {
            let now = typingClock()
            guard typingRate.admit(group, at: now) else { return GroupSendOutcome(messageID: "", copies: [:]) }
            typingAdmitted = now
        }
        let message = ChatMessage(type: type, sender: Sender(id: me.uid, name: name), payload: payload, timestamp: timestamp, group: reference)
        do {
            return try await fanOut(message, to: state.members, group: group, as: me)
        } catch {
            if let typingAdmitted { typingRate.revoke(group, admittedAt: typingAdmitted) }
            throw error
        }
    }

    /// The most members of a group typing indicators go to (spec/groups.md §4.5).
    public static let maxTypingGroupMembers = 32

    /// A receipt for group messages: to each author, naming that author's messages only.
    private func sendReceipt(_ receipt: Receipt, payload: Payload, group: GroupID, reference: GroupReference, timestamp: Int64,
                             name: String?, as me: Identity) async throws -> GroupSendOutcome {
        var byAuthor: [String: [String]] = [:]
        for id in receipt.messageIDs {
            let author = try await store.pool.read { db in
                try String.fetchOne(db, sql: "SELECT sender FROM inbox WHERE id = ? AND group_id = ?", arguments: [id, group.rawValue])
            }
            guard let author else { throw ClientError.unknownGroupMessage(id: id) }
            byAuthor[author, default: []].append(id)
        }
        var outcome: GroupSendOutcome?
        var copies: [String: SendOutcome] = [:]
        for (author, ids) in byAuthor.sorted(by: { $0.key < $1.key }) where author != me.uid {
            var own = payload
            own.receipt = Receipt(kind: receipt.kind, messageIDs: ids)
            let message = ChatMessage(type: .receipt, sender: Sender(id: me.uid, name: name), payload: own, timestamp: timestamp, group: reference)
            let sent = try await fanOut(message, to: [author], group: group, as: me)
            outcome = outcome ?? sent
            copies.merge(sent.copies) { $1 }
        }
        return GroupSendOutcome(messageID: outcome?.messageID ?? "", copies: copies)
    }

    /// Unsends group message `id`: each copy the relay stored and its member has not received
    /// yet is erased (one `DELETE` per copy, best effort: docs/design/groups.md §7.1), copies not
    /// yet handed to the relay (queued or held) are dropped, and the blobs of its files are
    /// erased. A member that received its copy keeps it.
    ///
    /// ```swift
    /// let sent = try await client.send(text: "wrong group", toGroup: trip.id)
    /// let erased = try await client.unsend(sent.messageID, toGroup: trip.id)   // members who never got it
    /// ```
    ///
    /// - Returns: The members whose copy was erased before they received it, sorted.
    /// - Throws: ``ClientError/notResendable(id:)`` when `id` is no message this device sent to
    ///   `group`; otherwise only a failure to read or write the store (a copy the relay could not be
    ///   asked about is left as it is, and not in the result).
    @discardableResult
    public func unsend(_ id: String, toGroup group: GroupID) async throws -> [String] {
        let sentTo = try await store.pool.read { db in
            try String.fetchOne(db, sql: "SELECT group_id FROM sent WHERE id = ?", arguments: [id])
        }
        guard sentTo == group.rawValue else { throw ClientError.notResendable(id: id) }
        let copies = try await store.copies(of: id)
        var erased: [String] = []
        for copy in copies where copy.state == "sent" || copy.state == "undelivered" {
            do {
                try await authorized { try await api.delete(owner: copy.recipient, id: id, session: $0) }
                erased.append(copy.recipient)
            } catch ClientError.relay(let problem) where problem.code == .forbidden || problem.code == .notFound {
                continue  // to its author, gone: received (acknowledged) or expired (spec/protocol.md §4.11)
            } catch {
                logger.info("could not unsend a group copy", metadata: ["id": "\(id)", "recipient": "\(copy.recipient)", "error": "\(Self.describe(error))"])
            }
        }
        try await store.pool.write { db in
            try db.execute(sql: """
                UPDATE group_copies SET state = 'dropped', envelope = NULL, key_id = NULL, last_error = 'unsent'
                WHERE message_id = ? AND state IN ('queued', 'held')
                """, arguments: [id])
            try ClientStore.summarise(id, db)
        }
        if let stored = try await store.outgoingBody(id), let message = try? ChatMessage.decode(stored.body) {
            for file in message.payload.files ?? [] {
                _ = try? await authorized { try await api.deleteBlob(file.blob, session: $0) }
            }
        }
        return erased.sorted()
    }

    /// Sends a text to every member of `group`: ``send(_:type:toGroup:name:)`` with a text payload.
    @discardableResult
    public func send(text: String, toGroup group: GroupID) async throws -> GroupSendOutcome {
        try await send(Payload(text: text), toGroup: group)
    }

    /// Where each copy of group message `id` stands, by member (dropped copies left out).
    public func copies(of id: String) async throws -> GroupSendOutcome { try await groupOutcome(of: id) }

    // MARK: Changes

    /// The folded state of `group` when this user is a member of it.
    func memberState(_ group: GroupID, me: String) async throws -> GroupState {
        guard let stored = try await store.group(group.rawValue), let state = try? GroupState.decode(folded: stored.state) else {
            throw ClientError.unknownGroup(group)
        }
        guard stored.status == .member, state.isMember(me) else { throw ClientError.notGroupMember(group) }
        return state
    }

    /// Builds, signs, applies and sends a change of `operations` on `group`'s folded tip: to
    /// every member, old and new, and to the removed (who must learn they are out); the copies to
    /// new members carry the state the change builds on (`base`).
    private func change(_ group: GroupID, _ operations: GroupOperations, adminOnly: Bool) async throws -> GroupChangeOutcome {
        let me = try await identity()
        let state = try await memberState(group, me: me.uid)
        if adminOnly, !state.isAdmin(me.uid) { throw ClientError.notGroupAdmin(group) }
        let made: (change: GroupChange, state: GroupState)
        do { made = try GroupChange.build(on: state, author: me.uid, operations: operations, key: me.signing) } catch { throw Self.clientError(error) }
        try await store.pool.write { db in
            _ = try ClientStore.take(made.change, group: group, me: me.uid, db)
        }
        let added = Set(operations.add ?? [])
        let told = Set(state.members).union(operations.remove ?? []).subtracting(added)
        let reference = GroupReference(made.state)
        let timestamp = Int64(Date().timeIntervalSince1970 * 1000)
        var copies: [String: SendOutcome] = [:]
        var messageID: String?
        if !told.subtracting([me.uid]).isEmpty {
            let message = ChatMessage(type: .groupChange, sender: Sender(id: me.uid), payload: Payload(groupChange: made.change),
                                      timestamp: timestamp, group: reference)
            let outcome = try await fanOut(message, to: told.sorted(), group: group, as: me)
            copies.merge(outcome.copies) { $1 }
            messageID = outcome.messageID
        }
        if !added.isEmpty {
            let message = ChatMessage(type: .groupChange, sender: Sender(id: me.uid), payload: Payload(groupChange: made.change.with(base: state)),
                                      timestamp: timestamp, group: reference)
            let outcome = try await fanOut(message, to: added.sorted(), group: group, as: me)
            copies.merge(outcome.copies) { $1 }
            messageID = messageID ?? outcome.messageID
        }
        return GroupChangeOutcome(group: try await self.group(group), send: GroupSendOutcome(messageID: messageID ?? "", copies: copies))
    }

    /// A format refusal as the client's error.
    static func clientError(_ error: GroupError) -> ClientError {
        switch error {
        case .notAllowed(let reason): .groupChangeNotAllowed(reason: reason)
        case .tooLarge: .groupTooLarge
        default: .invalidGroup(code: error.code)
        }
    }
}
