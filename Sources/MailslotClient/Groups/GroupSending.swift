import Foundation
import GRDB
import MailslotWire

// Sending to a group (docs/design/groups.md §3.2, §7.4): one message id for every copy, the body
// composed once, each copy sealed in the pairwise ratchet with its member. The copies whose
// ratchets are established are sealed and stored in ONE transaction with the `sent` row (one WAL
// checkpoint after it, not one per copy); a member with no ratchet yet (or a version 1 contact)
// goes through the 1:1 sealing path, which starts one. A member whose identity key changed gets
// a held copy, sent once trusted; the others go. The copies go to the relay in multi-recipient
// creates (`POST /v1/messages`), each entry's result deciding its own copy. Before any copy goes
// to the relay — the first
// time or on a retry — copies to someone the group no longer has are dropped (removal holds).
extension MailslotClient {
    /// Seals `message` for each of `recipients` under one new id and stores the group send and
    /// its copies; then hands the copies to the relay. `message.group` must be set. `id` is the
    /// message id when it was chosen before (a file's upload, GroupFiles.swift).
    func fanOut(_ message: ChatMessage, to recipients: [String], group: GroupID, id chosenID: String? = nil, wake: Bool? = nil,
                as me: Identity) async throws -> GroupSendOutcome {
        let body: [UInt8]
        do {
            try message.validate()
            body = try message.encoded()
        } catch { throw ClientError.cannotSeal(code: error.code) }
        let id = chosenID ?? MessageID.generate()
        var established: [Contact] = [], others: [String] = [], held: [String] = []
        for uid in Set(recipients).sorted() where uid != me.uid {
            do {
                let contact = try await self.contact(uid)
                if contact.signedPrekey != nil, try await store.hasActiveRatchet(with: contact) { established.append(contact) } else { others.append(uid) }
            } catch ClientError.keyChanged {
                held.append(uid)
            }
        }
        try await store.storeGroupSend(id: id, group: group, message: message, body: body, established: established,
                                       pending: others, held: held, wake: wake, as: me)
        await eraseOldCopies()
        for uid in others { await sealPendingCopy(id, to: uid, message: message, as: me) }
        return try await deliverCopies(of: id)
    }

    /// Seals a copy stored without an envelope (its member had no ratchet yet) through the 1:1
    /// sealing path, which starts one; held when the member's identity key changed, refused when
    /// it has no keys any more.
    private func sealPendingCopy(_ id: String, to uid: String, message: ChatMessage, as me: Identity) async {
        do {
            let sealed = try await seal(message, id: id, as: me, to: try await contact(uid))
            try await store.requeueCopy(id, recipient: uid, sealed: sealed)
            await eraseOldCopies()
        } catch ClientError.keyChanged {
            try? await store.markCopy(id, recipient: uid, state: "held", error: ClientError.keyChangedCode)
        } catch ClientError.noKeys {
            try? await store.markCopy(id, recipient: uid, state: "refused", error: ProblemCode.staleKeys.rawValue)
        } catch {
            logger.info("could not seal a group copy yet", metadata: ["id": "\(id)", "recipient": "\(uid)", "error": "\(Self.describe(error))"])
        }
    }

    /// Hands the queued copies of group message `id` to the relay in multi-recipient creates, each
    /// entry's result deciding its own copy exactly as 1:1 delivery does. Returns every copy's outcome.
    func deliverCopies(of id: String) async throws -> GroupSendOutcome {
        let me = try await identity()
        try await dropCopiesToNonMembers(of: id, me: me.uid)
        await deliverBatched(try await store.queuedCopies(of: id))
        return try await groupOutcome(of: id)
    }

    /// Hands `copies` (of one message) to the relay in multi-recipient creates (`POST
    /// /v1/messages`), sized by ``batchLimit``. Each entry's result decides its copy as a single
    /// create's answer would; a whole request that fails leaves its copies queued with backoff. A
    /// create the relay refuses as too large (a relay configured under the defaults) is chunked
    /// again at half the size, down to single creates, and the size is remembered (``BatchLimit``).
    /// A relay without the route (404, 405) is sent one create per copy.
    func deliverBatched(_ copies: [ClientStore.QueuedCopy]) async {
        var work = batchLimit.chunks(copies) { $0.sealed.envelope.count }
        while !work.isEmpty {
            let chunk = work.removeFirst()
            let entries = chunk.map { BatchEntry(to: $0.recipient, id: $0.messageID, envelope: $0.sealed.envelope, keyID: $0.sealed.keyID) }
            let results: [BatchResult]
            do {
                results = try await authorized { try await api.sendMany(entries, wake: chunk[0].wake, session: $0) }
            } catch ClientError.relay(let problem) where [404, 405].contains(problem.code.status) {
                for copy in chunk { await deliver(copy, reseals: 2) }
                continue
            } catch ClientError.relay(let problem) where BatchLimit.isTooLarge(problem) {
                guard chunk.count > 1 else {
                    await deliver(chunk[0], reseals: 2)  // as a single create: its own answer decides it
                    continue
                }
                let size = chunk.reduce(0) { $0 + BatchLimit.cost(envelopeCount: $1.sealed.envelope.count) }
                batchLimit.refused(problem, count: chunk.count, size: size)
                logger.info("the relay refused a send to many as too large; sending smaller ones",
                            metadata: ["entries": "\(chunk.count)", "code": "\(problem.code.rawValue)"])
                work.insert(contentsOf: batchLimit.chunks(chunk) { $0.sealed.envelope.count }, at: 0)
                continue
            } catch {
                for copy in chunk {
                    try? await store.copyFailed(copy.messageID, recipient: copy.recipient, error: Self.describe(error), now: Date().timeIntervalSince1970)
                }
                continue
            }
            for (copy, result) in zip(chunk, results) {
                switch result.outcome {
                case .stored: try? await store.markCopy(copy.messageID, recipient: copy.recipient, state: "sent")
                case .refused(let problem): await settle(copy, ClientError.relay(problem: problem), reseals: 2)
                }
            }
        }
    }

    /// Removal holds (§3.2 step 6): copies of `id` to someone not in the group as folded now are dropped.
    private func dropCopiesToNonMembers(of id: String, me: String) async throws {
        try await store.pool.write { db in
            guard let groupID = try String.fetchOne(db, sql: "SELECT group_id FROM sent WHERE id = ?", arguments: [id]),
                  let stored = try ClientStore.group(groupID, db), let state = try? GroupState.decode(stored.state) else { return }
            try ClientStore.dropCopies(in: groupID, notIn: stored.status == .member ? state.members : [], db)
        }
    }

    /// One create for one copy (a relay without the multi-recipient create, a copy sealed again).
    private func deliver(_ copy: ClientStore.QueuedCopy, reseals: Int) async {
        do {
            _ = try await authorized {
                try await api.send(to: copy.recipient, id: copy.messageID, envelope: copy.sealed.envelope, keyID: copy.sealed.keyID,
                                   wake: copy.wake, session: $0)
            }
            try await store.markCopy(copy.messageID, recipient: copy.recipient, state: "sent")
        } catch {
            await settle(copy, error, reseals: reseals)
        }
    }

    /// What a refused or failed create of `copy` leaves it: sealed again to the member's current
    /// keys (`stale_keys`), held (its identity key changed), refused for good, or queued with backoff.
    private func settle(_ copy: ClientStore.QueuedCopy, _ failure: any Error, reseals: Int) async {
        do { throw failure } catch ClientError.relay(let problem) where problem.code == .staleKeys && reseals > 0 {
            // The member publishes other keys: sealed again to them under the same id (held on a new identity key).
            do {
                let contact = try await refreshKeys(of: copy.recipient)
                guard let stored = try await store.outgoingBody(copy.messageID) else { return }
                let sealed = try await seal(try decodeStored(stored.body), id: copy.messageID, as: try await identity(), to: contact)
                try await store.requeueCopy(copy.messageID, recipient: copy.recipient, sealed: sealed)
                await eraseOldCopies()
                await deliver(ClientStore.QueuedCopy(messageID: copy.messageID, recipient: copy.recipient, groupID: copy.groupID, sealed: sealed,
                                                     wake: copy.wake, resealed: true), reseals: reseals - 1)
            } catch ClientError.keyChanged {
                try? await store.markCopy(copy.messageID, recipient: copy.recipient, state: "held", error: ClientError.keyChangedCode)
            } catch ClientError.noKeys {
                try? await store.markCopy(copy.messageID, recipient: copy.recipient, state: "refused", error: ProblemCode.staleKeys.rawValue)
            } catch {
                try? await store.copyFailed(copy.messageID, recipient: copy.recipient, error: Self.describe(error), now: Date().timeIntervalSince1970)
            }
        } catch ClientError.relay(let problem) where problem.code == .conflict && copy.resealed {
            try? await store.copyFailed(copy.messageID, recipient: copy.recipient, error: problem.code.rawValue, now: Date().timeIntervalSince1970)
        } catch ClientError.relay(let problem) where Self.isFinal(problem) {
            try? await store.markCopy(copy.messageID, recipient: copy.recipient, state: "refused", error: problem.code.rawValue)
        } catch {
            try? await store.copyFailed(copy.messageID, recipient: copy.recipient, error: Self.describe(error), now: Date().timeIntervalSince1970)
        }
    }

    /// Every copy of group message `id` as a ``GroupSendOutcome`` (dropped copies left out).
    func groupOutcome(of id: String) async throws -> GroupSendOutcome {
        var copies: [String: SendOutcome] = [:]
        for copy in try await store.copies(of: id) {
            let reason = copy.lastError.map(SendOutcome.Reason.init(recorded:)) ?? .unreachable
            switch copy.state {
            case "sent", "undelivered": copies[copy.recipient] = .sent(id: id)
            case "queued": copies[copy.recipient] = .queued(id: id, reason: reason)
            case "held": copies[copy.recipient] = .held(id: id, recipient: copy.recipient)
            case "refused": copies[copy.recipient] = .refused(id: id, reason: reason)
            default: continue  // dropped: the member left the group
            }
        }
        return GroupSendOutcome(messageID: id, copies: copies)
    }

    /// Tries every due copy of every group send again (``flush()``), and seals those stored
    /// before their member had a ratchet.
    func flushGroupCopies(now: Date) async {
        guard let me = try? await identity() else { return }
        for pending in (try? await store.pendingCopies()) ?? [] {
            if let message = try? decodeStored(pending.body) { await sealPendingCopy(pending.messageID, to: pending.recipient, message: message, as: me) }
        }
        let due = (try? await store.dueCopies(now: now.timeIntervalSince1970)) ?? []
        for id in Set(due.map(\.messageID)).sorted() {
            try? await dropCopiesToNonMembers(of: id, me: me.uid)
            let still = Set(((try? await store.copies(of: id)) ?? []).filter { $0.state == "queued" }.map(\.recipient))
            await deliverBatched(due.filter { $0.messageID == id && still.contains($0.recipient) })
        }
    }

    /// Seals and sends the copies held for `uid` (its new identity key was just trusted), unless
    /// the group no longer has it.
    func releaseHeldCopies(to uid: String) async {
        guard let me = try? await identity() else { return }
        for held in (try? await store.heldCopies(to: uid)) ?? [] {
            try? await dropCopiesToNonMembers(of: held.messageID, me: me.uid)
            guard (try? await store.copies(of: held.messageID).contains { $0.recipient == uid && $0.state == "held" }) == true,
                  let message = try? decodeStored(held.body) else { continue }
            await sealPendingCopy(held.messageID, to: uid, message: message, as: me)
            _ = try? await deliverCopies(of: held.messageID)
        }
    }

    /// Sends a control message (`group_sync`, `group_history`) about `group` to one peer: a group
    /// send of one copy. Best effort: the asks and answers it carries are made again when needed.
    func sendControl(_ type: MessageType, payload: Payload, group: GroupID, to peer: String, as me: Identity) async {
        do {
            let reference: GroupReference
            if let stored = try await store.group(group.rawValue), let state = try? GroupState.decode(stored.state) {
                reference = GroupReference(state)
            } else {
                // Not known here (an ask for a welcome): version 1 and no state hash it could have had.
                reference = GroupReference(id: group, version: 1, stateHash: GroupState.noPrevious)
            }
            let message = ChatMessage(type: type, sender: Sender(id: me.uid), payload: payload,
                                      timestamp: Int64(Date().timeIntervalSince1970 * 1000), group: reference)
            _ = try await fanOut(message, to: [peer], group: group, wake: false, as: me)
        } catch {
            logger.info("could not send a group control message", metadata: ["type": "\(type.rawValue)", "error": "\(Self.describe(error))"])
        }
    }
}

extension ClientStore {
    /// Seals `message` (encoded as `body`) under `id` in the active ratchet with each of
    /// `established` and stores the group send with every copy — sealed, `pending` (a ratchet to
    /// start first: stored held with `sealing`), or `held` (key changed) — in one transaction
    /// (docs/design/groups.md §7.4). The ratchets are read in one read and the copies sealed on
    /// several threads (``GroupSealing``), outside the transaction; the transaction stores each
    /// advanced ratchet with its envelope (spec/ratchet.md §6.2 item 6: nothing leaves before
    /// the commit) — unless the ratchet changed since the read (a 1:1 send or a receipt in
    /// between), when that copy is sealed again there from the stored state. A ratchet found
    /// unable to send (its counter at its end) leaves its copy pending.
    func storeGroupSend(id: String, group: GroupID, message: ChatMessage, body: [UInt8], established: [Contact], pending: [String],
                        held: [String], wake: Bool?, as me: Identity, now: Double = Date().timeIntervalSince1970) async throws {
        let states: [GroupSealing.Input] = try await pool.read { db in
            try established.compactMap { contact in
                guard let state = try Data.fetchOne(db, sql: "SELECT state FROM sessions WHERE contact = ? AND peer_identity = ? AND active = 1",
                                                    arguments: [contact.uid, Data(contact.identityKey.bytes)]) else { return nil }
                return GroupSealing.Input(contact: contact, state: state)
            }
        }
        let sealedOutside = try await GroupSealing.seal(body: body, id: id, from: me, states)
        try await pool.write { db in
            var copies: [(recipient: String, sealed: Sealed?)] = []
            var pendingUIDs = pending
            let sealedByUID = Dictionary(sealedOutside.map { ($0.contact.uid, $0) }, uniquingKeysWith: { first, _ in first })
            for contact in established {
                let current = try Data.fetchOne(db, sql: "SELECT state FROM sessions WHERE contact = ? AND peer_identity = ? AND active = 1",
                                                arguments: [contact.uid, Data(contact.identityKey.bytes)])
                if let sealed = sealedByUID[contact.uid], let current, current == sealed.readState {
                    try Self.save(sealed.ratchet, contact: contact.uid, db, now: now)
                    copies.append((contact.uid, Sealed(envelope: sealed.envelope, keyID: contact.keyID)))
                    continue
                }
                // Changed since the read (or not sealable then): sealed here from the stored state.
                guard var ratchet = Self.ratchet(current), ratchet.canSend else {
                    pendingUIDs.append(contact.uid)
                    continue
                }
                let envelope = try Envelope.seal(body: body, id: id, from: me.uid, identity: me.signing, to: contact.uid,
                                                 mailboxKey: contact.mailboxKey, ratchet: &ratchet)
                try Self.save(ratchet, contact: contact.uid, db, now: now)
                copies.append((contact.uid, Sealed(envelope: envelope, keyID: contact.keyID)))
            }
            for uid in pendingUIDs + held { copies.append((uid, nil)) }
            try Self.enqueueGroupSend(id: id, groupID: group.rawValue, message: message, body: body, copies: copies, wake: wake, db, now: now)
            for uid in pendingUIDs {
                try db.execute(sql: "UPDATE group_copies SET last_error = 'sealing' WHERE message_id = ? AND recipient = ?", arguments: [id, uid])
            }
            for uid in held {
                try db.execute(sql: "UPDATE group_copies SET last_error = ? WHERE message_id = ? AND recipient = ?",
                               arguments: [ClientError.keyChangedCode, id, uid])
            }
        }
    }

    /// Copies stored before their member had a ratchet (held with `sealing`), with the body to seal.
    func pendingCopies() async throws -> [(messageID: String, recipient: String, body: [UInt8])] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: """
                SELECT c.message_id, c.recipient, s.body FROM group_copies c JOIN sent s ON s.id = c.message_id
                WHERE c.state = 'held' AND c.last_error = 'sealing' ORDER BY c.message_id
                """).map { ($0["message_id"], $0["recipient"], Array($0["body"] as Data)) }
        }
    }
}
