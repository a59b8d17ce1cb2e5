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
}
