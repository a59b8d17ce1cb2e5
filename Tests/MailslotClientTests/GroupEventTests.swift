import Foundation
@testable import MailslotClient
import MailslotTestSupport
import MailslotWire
import Testing

/// Group events for the app (issue 30 item 2; docs/design/groups.md §7.2): a member's change
/// comes to the others as events on its message ("alice added dave"), and a group's history
/// (`changes(of:)`) says which changes applied and which the fold found void.
@Suite struct GroupEventTests {
    @Test func membersSeeWhoChangedWhatAndAVoidChangeShowsAsVoid() async throws {
        try await withTestRelay { relay in
            let users = try await relay.signedInClients(["alice", "bob", "carol", "dave"])
            let alice = users[0], bob = users[1], carol = users[2]
            let group = try await alice.createGroup(name: "Ops", members: ["bob", "carol"])
            let created = try await bob.receive()
            #expect(created.first?.events.map(\.author) == ["alice"])
            _ = try await carol.receive()
            try await alice.promote(["bob"], in: group.id)
            for member in [bob, carol] { _ = try await member.receive() }

            // alice adds dave: bob's events say "alice added dave", in the group, at version 3.
            try await alice.addMembers(["dave"], to: group.id)
            let added = try await bob.receive()
            #expect(added.count == 1 && added.first?.message.type == .groupChange && added.first?.group?.id == group.id)
            let event = try #require(added.first?.events.first)
            #expect(added.first?.events.count == 1)
            #expect(event.kind == .added(["dave"]) && event.author == "alice" && event.version == 3 && event.standing == .applied)
            #expect(event.group == GroupContext(id: group.id, name: "Ops", version: 3))
            _ = try await carol.receive()

            // At version 4, neither seeing the other's: alice (the senior) removes bob, bob renames
            // the group. The fold voids bob's rename (its author is removed at its version).
            try await alice.removeMembers(["bob"], from: group.id)
            try await bob.rename(group.id, to: "Bob's")
            let seen = try await carol.receive().filter { !$0.events.isEmpty }
            #expect(seen.map(\.sender) == ["alice", "bob"])
            #expect(seen.first?.events.map(\.kind) == [.removed(["bob"])] && seen.first?.events.first?.standing == .applied)
            #expect(seen.last?.events.map(\.kind) == [.renamed(to: "Bob's")] && seen.last?.events.first?.standing == .void)
            #expect(try await carol.group(group.id).name == "Ops")
            // bob learns alice removed him.
            let removal = try await bob.receive().flatMap(\.events)
            #expect(removal.map(\.kind) == [.removedMe] && removal.first?.author == "alice")

            // The history says the same, in version order, with who did what.
            let history = try await carol.changes(of: group.id)
            #expect(history.map(\.kind) == [.created(name: "Ops", members: ["alice", "bob", "carol"]), .promoted(["bob"]), .added(["dave"]),
                                            .removed(["bob"]), .renamed(to: "Bob's")])
            #expect(history.map(\.standing) == [.applied, .applied, .applied, .applied, .void])
            #expect(history.map(\.author) == ["alice", "alice", "alice", "alice", "bob"])
            // The author's own changes are in its history too.
            #expect(try await alice.changes(of: group.id).map(\.kind).last == .removed(["bob"]))
            let unknown = GroupID.random()
            await #expect(throws: ClientError.unknownGroup(unknown)) { _ = try await alice.changes(of: unknown) }
        }
    }

    /// A change that comes after a later change this device already applied (spec/groups.md §3.2:
    /// a late change applies at its version, and what follows is folded again): bob, an admin,
    /// renames the group (version 3) and promotes carol (version 4); carol applies both. alice,
    /// not having seen them, adds dave at version 3. carol gets alice's change last: it applies,
    /// and its event — on the message and in `changes(of:)` — is `.late`; on alice's device,
    /// bob's rename (a version she had already reached) is the late one.
    @Test func aChangeArrivingAfterALaterOneShowsAsLate() async throws {
        try await withTestRelay { relay in
            let users = try await relay.signedInClients(["alice", "bob", "carol", "dave"])
            let alice = users[0], bob = users[1], carol = users[2]
            let group = try await alice.createGroup(name: "Ops", members: ["bob", "carol"])
            for member in [bob, carol] { _ = try await member.receive() }
            try await alice.promote(["bob"], in: group.id)
            for member in [bob, carol] { _ = try await member.receive() }

            try await bob.rename(group.id, to: "Ops 2")
            #expect(try await bob.promote(["carol"], in: group.id).group.version == 4)
            let fromBob = try await carol.receive().flatMap(\.events)
            #expect(fromBob.map(\.kind) == [.renamed(to: "Ops 2"), .promoted(["carol"])] && fromBob.allSatisfy { $0.standing == .applied },
                    "\(fromBob)")
            #expect(try await carol.group(group.id).version == 4)

            // alice is still at version 2: her change is of version 3, which carol has passed.
            #expect(try await alice.addMembers(["dave"], to: group.id).group.version == 3)
            let late = try await carol.receive().filter { !$0.events.isEmpty }
            #expect(late.map(\.sender) == ["alice"], "\(late.map(\.sender))")
            let event = try #require(late.first?.events.first)
            #expect(late.first?.events.count == 1 && event.kind == .added(["dave"]) && event.author == "alice" && event.version == 3)
            #expect(event.standing == .late, "\(event.standing)")
            // It applied: dave is in, the rename and carol's promotion hold, still at version 4.
            let folded = try await carol.group(group.id)
            #expect(folded.members == ["alice", "bob", "carol", "dave"] && folded.admins == ["alice", "bob", "carol"], "\(folded)")
            #expect(folded.name == "Ops 2" && folded.version == 4)
            let history = try await carol.changes(of: group.id)
            #expect(history.map(\.kind) == [.created(name: "Ops", members: ["alice", "bob", "carol"]), .promoted(["bob"]),
                                            .renamed(to: "Ops 2"), .added(["dave"]), .promoted(["carol"])], "\(history.map(\.kind))")
            #expect(history.map(\.standing) == [.applied, .applied, .applied, .late, .applied], "\(history.map(\.standing))")

            // On alice's device her own change came first: bob's rename, of the version she had
            // reached, is late; his promotion of carol, of a version she had not, is applied.
            let atAlice = try await alice.receive().flatMap(\.events)
            #expect(atAlice.map(\.kind) == [.renamed(to: "Ops 2"), .promoted(["carol"])], "\(atAlice.map(\.kind))")
            #expect(atAlice.map(\.standing) == [.late, .applied], "\(atAlice.map(\.standing))")
            let seen = try await alice.group(group.id)
            #expect(seen.members == folded.members && seen.admins == folded.admins && seen.name == "Ops 2" && seen.version == 4)
            let alicesHash = try await alice.store.group(group.id.rawValue)?.stateHash
            let carolsHash = try await carol.store.group(group.id.rawValue)?.stateHash
            #expect(alicesHash != nil && alicesHash == carolsHash, "alice and carol fold the same state")
        }
    }
}
