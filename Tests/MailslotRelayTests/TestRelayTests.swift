import Foundation
import MailslotAudit
import MailslotTestSupport
import Testing

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
}
