import Foundation
import MailslotWire

/// The send to many (`POST /v1/messages`, spec/protocol.md §4.25) from outside: each entry is
/// decided as the single create to its `to` would be, so a batch writes nowhere a create may not
/// (no session, a blocked author, an invalid uid), the author is the session's uid whatever an
/// entry says, a result shows the sender's view only; and the request is refused whole
/// (`invalid_entries`, nothing stored) with no entries, a repeated pair, or more entries than any
/// relay may be set to take (10 000, §11).
enum BatchChecks {
    /// The highest `--max-batch-entries` a relay accepts (spec/protocol.md §11): one more is
    /// refused by every relay, whatever it was started with.
    static let entriesBeyondAnySetting = 10_001

    /// The per-entry rule cells, run with the rule checks.
    static func rules(_ context: AuditContext) async {
        let http = context.http
        let bob = context.bob!, alice = context.alice!, mallory = context.mallory!
        func entry(_ to: String, _ id: String = MessageID.generate(), extra: [String: Any] = [:]) -> [String: Any] {
            ["to": to, "id": id, "envelope": Base64URL.encode(randomBytes(512))].merging(extra) { new, _ in new }
        }
        func results(_ answer: AuditHTTP.Answer) -> [[String: Any]] { answer.json["results"] as? [[String: Any]] ?? [] }

        await context.check("rule.batch.anonymous-cannot-send") {
            let answer = try await http.call("POST", "/v1/messages", body: ["entries": [entry(bob.uid)]])
            context.expect("rule.batch.anonymous-cannot-send", answer, 401, "unauthenticated")
        }
        await context.check("rule.batch.blocked-entry-refused-others-stored") {
            let name = "rule.batch.blocked-entry-refused-others-stored"
            guard try await http.call("PUT", "/v1/users/\(bob.uid)/blocked/\(mallory.uid)", session: bob.session).status == 204 else {
                return context.record(name, false, "bob could not block mallory")
            }
            let toBob = MessageID.generate(), toAlice = MessageID.generate()
            let answer = try await http.call("POST", "/v1/messages", session: mallory.session,
                                             body: ["entries": [entry(bob.uid, toBob), entry(alice.uid, toAlice)]])
            mallory.remember(recipient: alice.uid, id: toAlice)
            mallory.remember(recipient: bob.uid, id: toBob)
            let got = results(answer)
            let inBob = try await http.call("GET", "/v1/users/\(bob.uid)/messages/\(toBob)", session: bob.session).status
            _ = try await http.call("DELETE", "/v1/users/\(bob.uid)/blocked/\(mallory.uid)", session: bob.session)
            let blocked = (got.first?["problem"] as? [String: Any])?["code"] as? String
            context.record(name, answer.status == 200 && got.count == 2 && blocked == "blocked" && got[1]["created"] as? Bool == true
                           && inBob == 404,
                           "answer \(answer.summary) \(answer.text.prefix(300)); the blocked entry in bob's mailbox: \(inBob)")
        }
        await context.check("rule.batch.author-is-the-session") {
            // An entry naming another author: refused as not the entry's shape, or stored stamped
            // with the session's uid — never as bob.
            let id = MessageID.generate()
            let answer = try await http.call("POST", "/v1/messages", session: mallory.session,
                                             body: ["entries": [entry(alice.uid, id, extra: ["author": bob.uid])]])
            mallory.remember(recipient: alice.uid, id: id)
            let stored = try await http.call("GET", "/v1/users/\(alice.uid)/messages/\(id)", session: alice.session)
            let refusedWhole = answer.status == 400 && stored.status == 404
            let stamped = answer.status == 200 && stored.status == 200 && stored.json["author"] as? String == mallory.uid
            context.record("rule.batch.author-is-the-session", refusedWhole || stamped,
                           "answer \(answer.summary); stored \(stored.summary) author \(stored.json["author"] ?? "none")")
        }
        await context.check("rule.batch.invalid-uid-entry-refused") {
            let id = MessageID.generate()
            let answer = try await http.call("POST", "/v1/messages", session: mallory.session, body: ["entries": [entry("..", id)]])
            let problem = results(answer).first?["problem"] as? [String: Any]
            context.record("rule.batch.invalid-uid-entry-refused", answer.status == 200 && problem?["code"] as? String == "invalid_uid",
                           "answer \(answer.summary) \(answer.text.prefix(300))")
        }
        await context.check("rule.batch.sender-sees-no-envelope") {
            let id = MessageID.generate()
            let answer = try await http.call("POST", "/v1/messages", session: mallory.session, body: ["entries": [entry(bob.uid, id)]])
            mallory.remember(recipient: bob.uid, id: id)
            let message = results(answer).first?["message"] as? [String: Any]
            context.record("rule.batch.sender-sees-no-envelope",
                           message != nil && message?["envelope"] == nil && message?["seq"] == nil && message?["author"] as? String == mallory.uid,
                           "answer \(answer.summary) \(answer.text.prefix(300))")
        }
    }

    /// The request-wide refusals, run with the limit checks: nothing of such a request is stored.
    static func limits(_ context: AuditContext) async {
        let http = context.http
        let bob = context.bob!, alice = context.alice!
        func refusedWhole(_ name: String, _ entries: [[String: Any]], probe: String) async {
            await context.check(name) {
                let answer = try await http.call("POST", "/v1/messages", session: alice.session, body: ["entries": entries])
                alice.remember(recipient: bob.uid, id: probe)
                let stored = try await http.call("GET", "/v1/users/\(bob.uid)/messages/\(probe)", session: bob.session).status
                context.record(name, answer.status == 400 && answer.code == "invalid_entries" && stored == 404,
                               "answer \(answer.summary); the probe entry in bob's mailbox: \(stored)")
            }
        }
        let probe = MessageID.generate()
        let one: [String: Any] = ["to": bob.uid, "id": probe, "envelope": Base64URL.encode(randomBytes(512))]
        await refusedWhole("limit.batch.no-entries", [], probe: probe)
        var again = one
        again["envelope"] = Base64URL.encode(randomBytes(512))
        await refusedWhole("limit.batch.repeated-pair", [one, again], probe: probe)
        // Small entries (their envelopes are not looked at before the count): about 0.5 MB.
        let many = [one] + (1..<entriesBeyondAnySetting).map { ["to": "x\($0)", "id": probe, "envelope": "AAAA"] as [String: Any] }
        await refusedWhole("limit.batch.entries-beyond-any-setting", many, probe: probe)
    }
}
