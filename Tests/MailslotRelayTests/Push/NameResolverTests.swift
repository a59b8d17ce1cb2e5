import Foundation
import MailslotTestSupport
import Synchronization
import Testing
@testable import MailslotRelay

/// The Web Push name resolver (spec/push.md §4.1 rule 1): a name server that never answers costs
/// a call no more than the timeout, and lookups left running are bounded.
@Suite struct NameResolverTests {
    /// Blocks lookups of "hang.test" until released (or 20 s); answers 127.0.0.1 for any other name.
    final class Gate: Sendable {
        let released = DispatchSemaphore(value: 0)
        let calls = Mutex(0)

        var lookup: NameResolver.Lookup {
            { [self] host, _ in
                calls.withLock { $0 += 1 }
                if host == "hang.test" { _ = released.wait(timeout: .now() + 20) }
                return [IPAddress(bytes: [127, 0, 0, 1])!]
            }
        }

        /// Lets every blocked lookup end.
        func release(_ count: Int) { for _ in 0..<count { released.signal() } }
    }

    @Test func aNameServerThatNeverAnswersCostsTheTimeoutNotMore() async throws {
        let gate = Gate()
        defer { gate.release(1) }
        let resolver = NameResolver(threads: 1, timeout: .milliseconds(300), lookup: gate.lookup)
        let addresses = await resolver.resolve("hang.test", port: 443)
        #expect(addresses == nil)
        // The lookup blocks for 20 s; the caller is back while it still runs (at the timeout, not
        // after the lookup: no timed assertion, the lookup's own state says so).
        #expect(resolver.pending == 1, "the caller waited for the lookup")
    }

    @Test func lookupsLeftRunningAreBoundedAndTheRestFailAtOnce() async throws {
        let gate = Gate()
        let resolver = NameResolver(threads: 2, timeout: .milliseconds(200), maxOutstanding: 2, lookup: gate.lookup)
        #expect(await resolver.resolve("hang.test", port: 443) == nil)
        #expect(await resolver.resolve("hang.test", port: 443) == nil)
        #expect(resolver.pending == 2, "both lookups still hold their threads")
        // A third name is not even looked up while two are pending: no queue grows behind them.
        #expect(await resolver.resolve("push.example.net", port: 443) == nil)
        #expect(gate.calls.withLock { $0 } == 2)
        // Once the name server answers, names resolve again.
        gate.release(2)
        try await eventually("the released lookups ended") { resolver.pending == 0 }
        #expect(await resolver.resolve("push.example.net", port: 443) == [IPAddress(bytes: [127, 0, 0, 1])!])
    }

    @Test func theSystemResolverAnswersForLocalhost() async throws {
        let resolver = NameResolver(timeout: .seconds(2))
        let addresses = try #require(await resolver.resolve("localhost", port: 443))
        #expect(!addresses.isEmpty && addresses.allSatisfy(\.isLoopback))
    }
}
