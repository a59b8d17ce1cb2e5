import Foundation
import MailslotAudit
import MailslotTestSupport
import Testing
@testable import MailslotRelay

/// The testing module's scoped relay: once its body ends, returned or thrown, nothing listens on
/// its port and its folders are gone.
@Suite struct TestRelayTests {
    struct Planned: Error {}

    func expectTornDown(port: Int, folders: [String]) {
        #expect(throws: (any Error).self, "nothing listens on \(port)") { _ = try RawConnection(port: port) }
        for folder in folders { #expect(!FileManager.default.fileExists(atPath: folder), "\(folder) is removed") }
    }

    @Test func theRelayIsStoppedAndRemovedAfterItsBody() async throws {
        let (port, folders) = try await withTestRelay { relay async throws in
            #expect(try await relay.call("GET", "/healthz").status == 200)
            #expect(FileManager.default.fileExists(atPath: relay.dataDirectory + "/relay.sqlite"), "the folder held the database")
            return (relay.port, [relay.folder, relay.dataDirectory])
        }
        expectTornDown(port: port, folders: folders)
    }

    @Test func theRelayIsStoppedAndRemovedWhenItsBodyThrows() async throws {
        var seen: (port: Int, folders: [String])?
        do {
            try await withTestRelay { relay in
                seen = (relay.port, [relay.folder, relay.dataDirectory])
                throw Planned()
            }
            Issue.record("the body's error was not rethrown")
        } catch is Planned {}
        let (port, folders) = try #require(seen)
        expectTornDown(port: port, folders: folders)
    }

    /// The body runs where the test does: a main-actor test hands it state that is not Sendable.
    @MainActor @Test func theBodyRunsInTheCallersIsolation() async throws {
        final class Seen { var status = 0 }
        let seen = Seen()
        try await withTestRelay { relay in
            seen.status = try await relay.call("GET", "/healthz").status
        }
        #expect(seen.status == 200)
    }

    /// Two relays on one new database: both torn down (and the database dropped) after the body;
    /// uids spread so that Alice and Bob are on different nodes, and what one node stores the
    /// other serves.
    @Test(.enabled(if: TestDatabase.unavailable == nil, "MAILSLOT_TEST_DATABASE_URL is not set: run the tests under tools/postgres run"))
    func aClusterIsTwoRelaysOnOneDatabaseTornDownTogether() async throws {
        let (ports, folders, database) = try await withTestRelay(store: .cluster(2)) { relay async throws in
            #expect(relay.nodes.count == 2 && relay.store == .cluster(2))
            #expect(relay.nodes.allSatisfy { $0.relay.store is PostgresStore && $0.databaseURL == relay.databaseURL })
            let alice = relay.node(for: "alice"), bob = relay.node(for: "bob")
            #expect(alice !== bob && alice.port != bob.port, "alice and bob on different relays")
            let session = try await alice.signIn("alice").session
            #expect(try await alice.send(session, to: "bob", id: messageID(1)).status == 201)
            let listed = try await bob.call("GET", "/v1/users/bob/messages", session: try await bob.signIn("bob").session)
            #expect(listed.text.contains(messageID(1)), "stored through one node, listed through the other")
            return (relay.nodes.map(\.port), relay.nodes.flatMap { [$0.folder, $0.dataDirectory] }, TestDatabase.name(of: try #require(relay.databaseURL)))
        }
        for port in ports { expectTornDown(port: port, folders: folders) }
        #expect(try await TestDatabase.admin("SELECT count(*) FROM pg_database WHERE datname = '\(database)'") == 0, "the database is dropped")
    }

    /// `eventually` returns as soon as its condition holds, and fails saying what it waited for
    /// and where when it never does.
    @Test func eventuallyFailsSayingWhatDidNotHappen() async throws {
        var asked = 0
        try await eventually { asked += 1; return asked == 3 }
        #expect(asked == 3, "asked again until it held, and not after")
        let failure = await #expect(throws: EventuallyTimedOut.self) {
            try await eventually(within: .milliseconds(50), "the impossible") { false }
        }
        #expect(failure?.description.hasPrefix("the impossible did not hold within") == true, "\(String(describing: failure))")
        #expect(failure?.description.contains("TestRelayTests.swift") == true)
    }

    /// `withDeadline` gives back what finished in time, and fails an operation that hangs.
    @Test func withDeadlineEndsAnOperationThatHangs() async throws {
        #expect(try await withDeadline(.seconds(10)) { 42 } == 42)
        let failure = await #expect(throws: DeadlinePassed.self) {
            try await withDeadline(.milliseconds(50), "a wait for ever") { () async throws -> Int in
                await AsyncStream<Int> { _ in }.first { _ in true } ?? 0
            }
        }
        #expect(failure?.description.hasPrefix("a wait for ever did not finish within") == true)
    }

    /// The test clock starts at the wall clock and moves only when told.
    @Test func theTestClockMovesWhenTheTestSays() {
        let clock = TestClock()
        let start = clock.now()
        #expect(abs(start - EpochMilliseconds.now()) < 5_000)
        clock.advance(by: .seconds(90))
        #expect(clock.now() - start >= 90_000 && clock.now() - start < 95_000)
        #expect(clock.relayClock.now() >= start + 90_000)
    }
}
