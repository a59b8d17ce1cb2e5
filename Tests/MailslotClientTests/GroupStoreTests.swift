import Foundation
import GRDB
@testable import MailslotClient
import MailslotWire
import Testing

/// The client store's side of groups, without a relay (issue 30's defects; docs/design/groups.md
/// §3.3, §7.3, §7.4): a fold result over the state limit reads back, the held-message bounds and
/// their refusal codes, and a group send of 1,000 copies costing one transaction and one checkpoint.
@Suite struct GroupStoreTests {
    /// A store in a folder of its own, removed afterwards.
    private func withStore<T>(_ body: (ClientStore) async throws -> T) async throws -> T {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("group-store-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: folder) }
        return try await body(try ClientStore(path: folder.appendingPathComponent("client.sqlite").path))
    }

    private static let group = GroupID(rawValue: "q0bV7pXx2yM4kQ8sT1uVwA")!

    /// A state of 1,000 members at version 9 whose JSON is exactly the §1.1 limit, alice its admin.
    private static func stateAtTheLimit() throws -> GroupState {
        let members = ["alice"] + (1...999).map { "m" + String(repeating: "0", count: 41) + String(format: "%04d", $0) }
        let previous = [UInt8](repeating: 9, count: 32)
        let short = try GroupState(id: group, version: 9, previous: previous, name: "n", members: members, admins: ["alice"])
        let missing = GroupLimits.maxStateBytes - short.encodedCount
        #expect((0..<GroupLimits.maxNameBytes).contains(missing))
        let state = try GroupState(id: group, version: 9, previous: previous, name: "n" + String(repeating: "x", count: missing),
                                   members: members, admins: ["alice"])
        #expect(state.encodedCount == GroupLimits.maxStateBytes)
        return state
    }

    /// spec/groups.md §3.2: a change at version 10 on a state at the limit (its adds dropped, the
    /// full group) folds to that state at version 10 — one byte over. This device stores it and
    /// must read it back as the group, not as a group it does not know.
    @Test func aFoldResultOverTheStateLimitReadsBack() async throws {
        try await withStore { store in
            let base = try Self.stateAtTheLimit()
            let change = try GroupChange.sign(group: Self.group, version: 10, previous: base.hash, author: "alice",
                                              operations: GroupOperations(add: ["zz"]), stateHash: [UInt8](repeating: 7, count: 32),
                                              key: IdentityKeyPair())
            let group = try await store.pool.write { db -> ChatGroup? in
                try ClientStore.save(ClientStore.StoredGroup(id: Self.group.rawValue, state: base.encoded(), stateHash: base.hash, version: 9,
                                                             origin: 9, base: base.encoded(), status: .member, removedBy: nil), db)
                try ClientStore.insertChange(Self.group.rawValue, changeID: change.id(group: Self.group), version: 10, author: "alice",
                                             json: change.storedJSON, db)
                let folded = try #require(try ClientStore.refold(Self.group, me: "alice", db))
                #expect(folded.state.version == 10 && folded.state.encodedCount == GroupLimits.maxStateBytes + 1)
                return try ClientStore.chatGroup(Self.group.rawValue, me: "alice", db)
            }
            #expect(group?.version == 10 && group?.members.count == 1_000 && group?.members.contains("zz") == false)
            // What is received is still held to §1.1.
            let stored = try #require(try await store.group(Self.group.rawValue))
            #expect(throws: GroupError.self) { try GroupState.decode(stored.state) }
        }
    }

    /// Stores `count` held messages of group `groupID`, the first oldest.
    private func hold(_ count: Int, in groupID: String, from start: Double, prefix: String, _ db: Database) throws {
        for index in 0..<count {
            try db.execute(sql: "INSERT INTO group_held (message_id, group_id, version, sender, body, received_at) VALUES (?, ?, 1, 'bob', x'7B7D', ?)",
                           arguments: ["\(prefix)\(String(format: "%05d", index))", groupID, start + Double(index)])
        }
    }

    /// A known group (a row in `groups`): only its id matters to the bounds.
    private func know(_ groupID: String, _ db: Database) throws {
        try db.execute(sql: """
            INSERT INTO groups (id, state, state_hash, version, origin, base, status, updated_at) VALUES (?, x'7B7D', x'00', 1, 1, NULL, 'member', 0)
            """, arguments: [groupID])
    }

    private func rejected(_ db: Database) throws -> [String: String] {
        Dictionary(uniqueKeysWithValues: try Row.fetchAll(db, sql: "SELECT id, reason FROM rejected").map { ($0["id"], $0["reason"]) })
    }

    /// spec/groups.md §4.3: 256 held messages per group; the 257th makes the oldest refused
    /// `group_state_unknown`, and the others stay held.
    @Test func theTwoHundredFiftySeventhHeldMessageRefusesTheOldest() async throws {
        try await withStore { store in
            let now = Date().timeIntervalSince1970
            try await store.pool.write { db in
                try know("g1", db)
                try hold(256, in: "g1", from: now - 1000, prefix: "a", db)
                try ClientStore.rejectHeldOverBounds(db, now: now)
                #expect(try rejected(db).isEmpty)
                try hold(1, in: "g1", from: now - 10, prefix: "b", db)
                try ClientStore.rejectHeldOverBounds(db, now: now)
                #expect(try rejected(db) == ["a00000": "group_state_unknown"])
                #expect(try Int.fetchOne(db, sql: "SELECT count(*) FROM group_held") == 256)
            }
        }
    }

    /// spec/groups.md §4.3, §5: past the 2,048 held in all, a message of a group never learned is
    /// refused `group_unknown` (not `group_state_unknown`, the code of a known group's).
    @Test func anUnknownGroupsMessagePastTheTotalBoundIsRefusedGroupUnknown() async throws {
        try await withStore { store in
            let now = Date().timeIntervalSince1970
            try await store.pool.write { db in
                // The oldest: one message of an unknown group, within its day and its 64.
                try hold(1, in: "unknown", from: now - 5000, prefix: "u", db)
                // Then 2,048 of known groups, 256 each: within every per-group bound.
                for group in 0..<8 {
                    try know("k\(group)", db)
                    try hold(256, in: "k\(group)", from: now - 4000 + Double(group * 300), prefix: "k\(group)-", db)
                }
                try ClientStore.rejectHeldOverBounds(db, now: now)
                #expect(try rejected(db) == ["u00000": "group_unknown"])
                // One more of a known group: the oldest known one goes, refused as such.
                try hold(1, in: "k7", from: now - 1, prefix: "late", db)
                try ClientStore.rejectHeldOverBounds(db, now: now)
                #expect(try rejected(db)["k0-00000"] == "group_state_unknown")
            }
        }
    }

    /// Two group sends at once on one store read the same ratchets and seal outside the
    /// transaction: the second to store finds them changed and seals its copies again from the
    /// stored states, so each ratchet advances twice — exactly as two sends one after the other
    /// leave it (a symmetric step is deterministic) — and no message key is used twice.
    @Test func twoSendsAtOnceAdvanceEachRatchetTwice() async throws {
        let me = Identity(uid: "alice", signing: IdentityKeyPair(), mailbox: MailboxKeyPair())
        var members: [(Contact, Ratchet)] = []
        for index in 0..<64 {
            let identity = IdentityKeyPair(), prekey = PublishedPrekey(id: 1, key: MailboxKeyPair().publicKey)
            let contact = Contact(uid: String(format: "m%04d", index), identityKey: identity.publicKey, mailboxKey: MailboxKeyPair().publicKey,
                                  trust: .pinned, signedPrekey: prekey)
            members.append((contact, try Ratchet.initiate(identity: me.signing, peerIdentity: identity.publicKey, signedPrekey: prekey, oneTimePrekey: nil)))
        }
        let contacts = members.map(\.0)
        let message = ChatMessage(type: .text, sender: Sender(id: "alice"), payload: Payload(text: "twice"), timestamp: 1_800_000_000_000,
                                  group: GroupReference(id: Self.group, version: 1, stateHash: [UInt8](repeating: 1, count: 32)))
        let body = try message.encoded()
        func states(_ store: ClientStore) async throws -> [String: Data] {
            try await store.pool.read { db in
                Dictionary(uniqueKeysWithValues: try Row.fetchAll(db, sql: "SELECT contact, state FROM sessions").map { ($0["contact"], $0["state"]) })
            }
        }
        let oneAfterTheOther = try await withStore { store in
            for (contact, ratchet) in members { try await store.startRatchet(ratchet, with: contact) }
            for _ in 0..<2 {
                try await store.storeGroupSend(id: MessageID.generate(), group: Self.group, message: message, body: body, established: contacts,
                                               pending: [], held: [], wake: nil, as: me)
            }
            return try await states(store)
        }
        let atOnce = try await withStore { store in
            for (contact, ratchet) in members { try await store.startRatchet(ratchet, with: contact) }
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<2 {
                    group.addTask {
                        try await store.storeGroupSend(id: MessageID.generate(), group: Self.group, message: message, body: body,
                                                       established: contacts, pending: [], held: [], wake: nil, as: me)
                    }
                }
                try await group.waitForAll()
            }
            return try await states(store)
        }
        #expect(atOnce.count == 64 && atOnce == oneAfterTheOther)
    }

    /// docs/design/groups.md §7.4: a group send of 1,000 copies, every member's ratchet
    /// established, seals every copy (on several threads) and stores them, the advanced ratchets
    /// and the `sent` row in ONE transaction; the send's checkpoint after it is the only one.
    @Test func aThousandCopiesAreStoredInOneTransactionAndOneCheckpoint() async throws {
        try await withStore { store in
            let me = Identity(uid: "alice", signing: IdentityKeyPair(), mailbox: MailboxKeyPair())
            var contacts: [Contact] = []
            for index in 0..<1_000 {
                let identity = IdentityKeyPair(), mailbox = MailboxKeyPair(), prekey = PublishedPrekey(id: 1, key: MailboxKeyPair().publicKey)
                let contact = Contact(uid: String(format: "m%04d", index), identityKey: identity.publicKey, mailboxKey: mailbox.publicKey,
                                      trust: .pinned, signedPrekey: prekey)
                let ratchet = try Ratchet.initiate(identity: me.signing, peerIdentity: identity.publicKey, signedPrekey: prekey, oneTimePrekey: nil)
                try await store.startRatchet(ratchet, with: contact)
                contacts.append(contact)
            }
            let message = ChatMessage(type: .text, sender: Sender(id: "alice"), payload: Payload(text: "to all"),
                                      timestamp: 1_800_000_000_000, group: GroupReference(id: Self.group, version: 1, stateHash: [UInt8](repeating: 1, count: 32)))
            let id = MessageID.generate()
            let (commits, checkpoints) = (store.counters.commits, store.counters.checkpoints)
            try await store.storeGroupSend(id: id, group: Self.group, message: message, body: try message.encoded(), established: contacts,
                                           pending: [], held: [], wake: nil, as: me)
            #expect(store.counters.commits - commits == 1)
            #expect(store.counters.checkpoints == checkpoints, "storing makes none; fanOut makes the one after it")
            let queued = try await store.queuedCopies(of: id)
            #expect(queued.count == 1_000 && Set(queued.map(\.recipient)) == Set(contacts.map(\.uid)))
            // Every ratchet advanced and stored with its envelope: a second send starts from the
            // stored states (none is found changed: still one transaction) and gives other envelopes.
            let again = MessageID.generate()
            try await store.storeGroupSend(id: again, group: Self.group, message: message, body: try message.encoded(), established: contacts,
                                           pending: [], held: [], wake: nil, as: me)
            #expect(store.counters.commits - commits == 2)
            let second = Dictionary(uniqueKeysWithValues: try await store.queuedCopies(of: again).map { ($0.recipient, $0.sealed.envelope) })
            #expect(second.count == 1_000 && queued.allSatisfy { second[$0.recipient] != $0.sealed.envelope })
        }
    }
}
