import Foundation
import MailslotWire

/// One-time prekeys and keys beyond the access rules (spec/protocol.md §4.14, §4.6, §4.7, §8.4):
/// what an upload may carry, how claims are limited — per claimer, per owner, and fairly between
/// claimers — a create sealed to replaced keys, the one form of `signed_prekey_id`, and the
/// prekey counts of the subscription. Each check uses owners and claimers of its own (their
/// buckets start full), and is bounded in requests: at most ``claimBound`` claims per claimer.
enum PrekeyChecks {
    /// The most claims one claimer makes of one owner, or over all owners, before a check gives
    /// up on finding the limit (the default limits refuse after 15 and 60).
    static let claimBound = 100

    @Sendable static func run(_ context: AuditContext) async {
        await uploads(context)
        await claimLimits(context)
        await keys(context)
        await subscriptionCounts(context)
    }

    static func upload(_ ids: [Any], key: (Int) -> String = { _ in Base64URL.encode(MailboxKeyPair().publicKey.bytes) }) -> [String: Any] {
        ["prekeys": ids.enumerated().map { ["id": $0.element, "key": key($0.offset)] }]
    }

    static func claim(_ context: AuditContext, _ claimer: AuditUser, of owner: String) async throws -> AuditHTTP.Answer {
        try await context.http.call("POST", "/v1/users/\(owner)/prekeys/claim", session: claimer.session, body: [String: Any]())
    }

    /// Whether `answer` is the claim limit's refusal, with its wait in the header and the body.
    static func isClaimLimit(_ answer: AuditHTTP.Answer) -> Bool {
        guard answer.status == 429, answer.code == "prekey_claims_limited", let header = answer.headers["retry-after"].flatMap(Int.init),
              header >= 1 else { return false }
        return answer.json["retry_after"] as? Int == header
    }

    // MARK: Uploads

    /// Every malformed upload is refused whole, and stores nothing.
    static func uploads(_ context: AuditContext) async {
        let http = context.http
        let path = "/v1/users/\(context.bob.uid)/prekeys"
        let session = context.bob.session
        func count() async throws -> Int? { try await http.call("GET", path, session: session).json["count"] as? Int }
        let good = { (_: Int) in Base64URL.encode(MailboxKeyPair().publicKey.bytes) }
        let refused: [(String, [String: Any], Set<String>)] = [
            ("prekey.upload.empty", ["prekeys": [Any]()], ["invalid_prekey"]),
            ("prekey.upload.over-100", upload(Array(1...101)), ["invalid_prekey", "body_too_large"]),
            ("prekey.upload.id-0", upload([0]), ["invalid_prekey"]),
            ("prekey.upload.id-negative", upload([-1]), ["invalid_json", "invalid_prekey"]),
            ("prekey.upload.id-over-32-bits", upload([4_294_967_296]), ["invalid_json", "invalid_prekey"]),
            ("prekey.upload.id-fraction", upload([1.5]), ["invalid_json", "invalid_prekey"]),
            ("prekey.upload.id-twice", upload([7, 7]), ["invalid_prekey"]),
            ("prekey.upload.key-31-bytes", upload([1], key: { _ in Base64URL.encode(randomBytes(31)) }), ["invalid_prekey"]),
            ("prekey.upload.key-padded", upload([1], key: { good($0) + "=" }), ["invalid_prekey"]),
            ("prekey.upload.key-low-order", upload([1], key: { _ in Base64URL.encode([UInt8](repeating: 0, count: 32)) }), ["invalid_prekey"]),
        ]
        await context.check("prekey.upload.setup") {
            _ = try await http.call("DELETE", path, session: session)
            let answer = try await http.call("POST", path, session: session, body: upload([1, 2]))
            context.record("prekey.upload.setup", answer.status == 200 && answer.json["count"] as? Int == 2, "the owner's upload answered \(answer.summary)")
        }
        for (name, body, codes) in refused {
            await context.check(name) {
                // One good prekey rides along: nothing of a refused upload is stored.
                var body = body
                if var prekeys = body["prekeys"] as? [[String: Any]], !prekeys.isEmpty, prekeys.count <= 100 {
                    prekeys.append(["id": 99, "key": good(0)])
                    body["prekeys"] = prekeys
                }
                let answer = try await http.call("POST", path, session: session, body: body)
                let left = try await count()
                context.record(name, answer.status / 100 == 4 && answer.code.map(codes.contains) == true && left == 2,
                               "expected \(codes.sorted().joined(separator: " or ")) and nothing stored; got \(answer.summary), \(left.map(String.init) ?? "no") stored")
            }
        }
        await context.check("prekey.upload.conflict") {
            let answer = try await http.call("POST", path, session: session, body: upload([2, 3]))
            let left = try await count()
            context.record("prekey.upload.conflict", answer.status == 409 && answer.code == "prekey_conflict" && left == 2,
                           "an id stored with another key: expected 409 prekey_conflict and nothing stored; got \(answer.summary), \(left.map(String.init) ?? "no") stored")
        }
        _ = try? await http.call("DELETE", path, session: session)
    }

    // MARK: Claim limits

    /// The claimer's own bucket, the owner's, and the owner's fairness to a new claimer.
    static func claimLimits(_ context: AuditContext) async {
        // One claimer over many owners (uids nobody uses: a claim needs no supply to count):
        // refused at last on an owner it never claimed and nobody else did — its own bucket.
        await context.check("prekey.claims.limited-per-claimer") {
            let claimer = try await context.signIn("claimer-wide")
            for attempt in 0..<claimBound {
                // A few claims per owner, below any owner's or pair's limit.
                let answer = try await claim(context, claimer, of: context.uid("wide-owner-\(attempt / 4)"))
                if answer.status == 200 { continue }
                return context.record("prekey.claims.limited-per-claimer", isClaimLimit(answer) && attempt >= 1,
                                      "claim \(attempt + 1) answered \(answer.summary), Retry-After \(answer.headers["retry-after"] ?? "none")")
            }
            context.record("prekey.claims.limited-per-claimer", false, "\(claimBound) claims over \(claimBound / 4) owners, none refused")
        }
        // One claimer drains what it may of one owner's bucket; a claimer that never claimed that
        // owner is still served (it cannot starve the others); then claimers together are
        // limited by the owner's bucket: fresh claimers are mostly refused.
        let owner = context.uid("claimed-owner")
        var drained = false
        await context.check("prekey.claims.one-claimer-cannot-starve-others") {
            let greedy = try await context.signIn("claimer-greedy")
            for attempt in 0..<claimBound {
                let answer = try await claim(context, greedy, of: owner)
                if answer.status == 200 { continue }
                guard isClaimLimit(answer) else {
                    return context.record("prekey.claims.one-claimer-cannot-starve-others", false, "claim \(attempt + 1) answered \(answer.summary)")
                }
                drained = true
                break
            }
            guard drained else {
                return context.record("prekey.claims.one-claimer-cannot-starve-others", false, "\(claimBound) claims of one owner, none refused")
            }
            let fresh = try await context.signIn("claimer-fresh")
            let answer = try await claim(context, fresh, of: owner)
            context.record("prekey.claims.one-claimer-cannot-starve-others", answer.status == 200,
                           "after one claimer was refused, a new claimer's first claim answered \(answer.summary)")
        }
        await context.check("prekey.claims.limited-per-owner") {
            guard drained else { return context.skip("prekey.claims.limited-per-owner", "no claimer was refused") }
            // Claimers with full buckets of their own, each taking what its share allows, until
            // one is refused on its first claim: only the owner's bucket can refuse that.
            for index in 0..<8 {
                let claimer = try await context.signIn("claimer-crowd-\(index)")
                for attempt in 0..<claimBound {
                    let answer = try await claim(context, claimer, of: owner)
                    if answer.status == 200 { continue }
                    guard isClaimLimit(answer) else {
                        return context.record("prekey.claims.limited-per-owner", false, "a claim answered \(answer.summary)")
                    }
                    if attempt == 0 { return context.record("prekey.claims.limited-per-owner", true) }
                    break
                }
            }
            context.record("prekey.claims.limited-per-owner", false, "8 new claimers were each served at least once: no limit per owner")
        }
    }

    // MARK: Keys

    /// A create sealed to replaced keys is refused; `signed_prekey_id` has one form.
    static func keys(_ context: AuditContext) async {
        let http = context.http
        await context.check("keys.stale-key-id-is-refused") {
            let owner = try await context.signIn("stale-owner")
            func publish() async throws -> (KeyBundle, Int) {
                let bundle = KeyBundle(uid: owner.uid, identity: IdentityKeyPair(), mailboxKey: MailboxKeyPair().publicKey)
                return (bundle, try await http.call("PUT", "/v1/users/\(owner.uid)/keys", session: owner.session, body: Data(bundle.encoded())).status)
            }
            let (old, first) = try await publish()
            let (current, second) = try await publish()
            let stale = try await context.send(context.alice, to: owner.uid, extra: ["key_id": old.keyID])
            let fresh = try await context.send(context.alice, to: owner.uid, extra: ["key_id": current.keyID])
            context.record("keys.stale-key-id-is-refused",
                           first == 204 && second == 204 && stale.status == 409 && stale.code == "stale_keys" && fresh.status == 201,
                           "published \(first), \(second); a create sealed to the old keys answered \(stale.summary), to the current ones \(fresh.summary)")
        }
        await context.check("keys.signed-prekey-id-has-one-form") {
            let owner = try await context.signIn("form-owner")
            let bundle = KeyBundle(uid: owner.uid, identity: IdentityKeyPair(), mailboxKey: MailboxKeyPair().publicKey,
                                   signedPrekey: PublishedPrekey(id: 4_000_000_000, key: MailboxKeyPair().publicKey))
            let text = String(decoding: bundle.encoded(), as: UTF8.self)
            var answers: [String] = []
            for form in ["4e9", "4000000000.0"] {
                let body = text.replacingOccurrences(of: #""signed_prekey_id":4000000000"#, with: #""signed_prekey_id":\#(form)"#)
                let answer = try await http.call("PUT", "/v1/users/\(owner.uid)/keys", session: owner.session, body: Data(body.utf8))
                if answer.status != 400 || answer.code != "invalid_key_bundle" { answers.append("\(form): \(answer.summary)") }
            }
            let plain = try await http.call("PUT", "/v1/users/\(owner.uid)/keys", session: owner.session, body: Data(text.utf8))
            context.record("keys.signed-prekey-id-has-one-form", answers.isEmpty && plain.status == 204,
                           "expected 400 invalid_key_bundle for other forms and 204 for plain digits; got \(answers), plain \(plain.summary)")
        }
    }

    // MARK: The subscription's counts

    /// `ready` says how many prekeys the owner has; a claim that takes them below the low-water
    /// mark sends one `prekeys` frame, and further claims below it none.
    static func subscriptionCounts(_ context: AuditContext) async {
        let http = context.http
        await context.check("prekey.subscription.ready-and-low-water") {
            let owner = try await context.signIn("low-owner"), claimer = try await context.signIn("low-claimer")
            let mark = PrekeyCount.lowWater
            let uploaded = try await http.call("POST", "/v1/users/\(owner.uid)/prekeys", session: owner.session, body: upload(Array(1...(mark + 1))))
            guard uploaded.status == 200 else {
                return context.record("prekey.subscription.ready-and-low-water", false, "the upload answered \(uploaded.summary)")
            }
            let socket = RelaySocket.subscribe(base: context.target.relay, uid: owner.uid, session: owner.session)
            let problems: [String]
            do {
                problems = try await lowWater(context, socket: socket, owner: owner, claimer: claimer, mark: mark)
            } catch {
                await socket.close()
                throw error
            }
            await socket.close()
            context.record("prekey.subscription.ready-and-low-water", problems.isEmpty, problems.joined(separator: "; "))
        }
    }

    /// The frames of `owner`'s subscription while `claimer` takes its supply from `mark` + 1 to
    /// `mark` − 2: what differs from `ready` with `mark` + 1, then one `prekeys` frame at `mark` − 1.
    private static func lowWater(_ context: AuditContext, socket: RelaySocket, owner: AuditUser, claimer: AuditUser,
                                 mark: Int) async throws -> [String] {
        let ready = try await socket.next(timeout: .seconds(10))
        guard ready?.type == "ready", ready?.prekeys == mark + 1 else {
            return ["expected ready with prekeys \(mark + 1), got \(ready.map { "\($0)" } ?? "nothing")"]
        }
        var problems: [String] = []
        for expected in [nil, RelayFrame.prekeys(mark - 1), nil] {
            let answer = try await claim(context, claimer, of: owner.uid)
            guard answer.status == 200 else { return problems + ["a claim answered \(answer.summary)"] }
            let frame = try await socket.next(timeout: expected == nil ? .milliseconds(500) : .seconds(5))
            if frame != expected {
                problems.append("\(frame.map { "\($0)" } ?? "nothing") instead of \(expected.map { "\($0)" } ?? "nothing")")
            }
        }
        return problems
    }
}
