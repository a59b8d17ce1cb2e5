import Foundation
@testable import MailslotClient
import MailslotTestSupport
import MailslotWire
import Testing

/// The client library's prekey calls (RelayAPI) against a relay: what they send, what they make
/// of the answers, and a refusal as ``ClientError/relay(_:)`` with its code.
@Suite struct PrekeyAPITests {
    /// The code of the problem `call` was refused with; nil when it was not refused so.
    static func code(_ call: () async throws -> some Any) async -> ProblemCode? {
        do {
            _ = try await call()
            return nil
        } catch ClientError.relay(let problem) {
            return problem.code
        } catch {
            return nil
        }
    }

    @Test func uploadCountClaimAndWithdraw() async throws {
        try await withTestRelay { relay in
            let api = RelayAPI(base: relay.url)
            let bob = try await relay.signIn("bob").session, alice = try await relay.signIn("alice").session
            let keys = (0..<3).map { _ in MailboxKeyPair().publicKey }
            let prekeys = keys.enumerated().map { Prekey(id: UInt32($0.offset + 1), key: $0.element) }
            #expect(try await api.uploadPrekeys(prekeys, owner: "bob", session: bob) == 3)
            #expect(try await api.uploadPrekeys(Array(prekeys.prefix(1)), owner: "bob", session: bob) == 3, "a retry")
            #expect(try await api.prekeyCount(owner: "bob", session: bob) == 3)

            let claimed = try #require(try await api.claimPrekey(for: "bob", session: alice))
            #expect(claimed.id == 1 && claimed.key == keys[0])
            #expect(try await api.prekeyCount(owner: "bob", session: bob) == 2)

            let conflict = [Prekey(id: 2, key: MailboxKeyPair().publicKey)]
            #expect(await Self.code { try await api.uploadPrekeys(conflict, owner: "bob", session: bob) } == .prekeyConflict)
            #expect(await Self.code { try await api.prekeyCount(owner: "bob", session: alice) } == .forbidden)
            #expect(await Self.code { try await api.uploadPrekeys(prekeys, owner: "bob", session: alice) } == .forbidden)

            try await api.deletePrekeys(owner: "bob", session: bob)
            #expect(try await api.claimPrekey(for: "bob", session: alice) == nil, "none left")
        }
    }
}
