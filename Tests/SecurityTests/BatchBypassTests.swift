import Foundation
import MailslotTestSupport
import MailslotWire
import Testing
@testable import MailslotRelay

/// A send to many (spec/protocol.md §4.25) is no way around what the single create enforces:
/// each entry asks the same access rule, meets the same block list, the same per-author bucket
/// and the same envelope checks, and a refused entry stores nothing.
@Suite struct BatchBypassTests {
    static func post(_ relay: TestRelay, _ session: String, _ entries: [BatchEntry]) async throws -> [BatchResult] {
        let answer = try await relay.call("POST", "/v1/messages", session: session, json: BatchCreateRequest(entries: entries))
        guard answer.status == 200 else { throw TestRelayError("send to many: \(answer.summary) \(answer.text)") }
        return try answer.decoded(BatchResponse.self).results
    }

    /// A relay whose rules let messages go only into one's own mailbox: the batch asks the rule
    /// for each entry's recipient, as `PUT …/messages/{id}` asks it for `{uid}`.
    @Test func aBatchAsksTheAccessRuleForEveryRecipient() async throws {
        var table = AccessRules.standard.table
        table[.message]?[.create] = [.owner]
        let ownOnly = AccessRules(table: table)
        try await withSecurityRelay(configure: { $0.rules = ownOnly }) { relay in
            let mallory = try await relay.signIn("mallory").session
            let id = messageID(1)
            #expect(try await relay.send(mallory, to: "victim", id: id).problem == .forbidden, "the single create is refused")
            let results = try await Self.post(relay, mallory, [
                BatchEntry(to: "victim", id: id, envelope: randomBytes(512)),
                BatchEntry(to: "mallory", id: id, envelope: randomBytes(512)),
                BatchEntry(to: "other-victim", id: id, envelope: randomBytes(512)),
            ])
            #expect(results.map { $0.problem?.code } == [.forbidden, nil, .forbidden])
            #expect(results[1].created == true, "the entry the rule allows is stored")
            let victim = try await relay.signIn("victim").session
            #expect(try await relay.call("GET", "/v1/users/victim/messages", session: victim).json["messages"].map { ($0 as? [Any])?.count } == 0,
                    "nothing reached the victim's mailbox")
        }
    }

    /// A blocked author cannot reach the owner by hiding among other recipients, nor outrun the
    /// per-author bucket (60 here) by putting many recipients in one request.
    @Test func aBatchMeetsTheBlockListAndTheBucketPerRecipient() async throws {
        try await withSecurityRelay { relay in
            let mallory = try await relay.signIn("mallory").session, victim = try await relay.signIn("victim").session
            #expect(try await relay.call("PUT", "/v1/users/victim/blocked/mallory", session: victim).status == 204)
            let id = messageID(2)
            let entries = [BatchEntry(to: "victim", id: id, envelope: randomBytes(512))]
                + (0..<99).map { BatchEntry(to: "target-\($0)", id: id, envelope: randomBytes(512)) }
            let results = try await Self.post(relay, mallory, entries)
            #expect(results[0].problem?.code == .blocked)
            let stored = results.filter { $0.created == true }.count
            let limited = results.filter { $0.problem?.code == .rateLimited }.count
            #expect(stored <= 60 && stored + limited == 99, "one token per recipient: at most the burst is stored (\(stored))")
            #expect(try await relay.call("GET", "/v1/users/victim/messages", session: victim).json["messages"].map { ($0 as? [Any])?.count } == 0)
        }
    }
}
