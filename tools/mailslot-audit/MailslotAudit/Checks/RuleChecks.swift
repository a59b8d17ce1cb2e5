import Foundation
import MailslotWire

/// Every cell of the access-rule table (spec/protocol.md §2), from outside: the owner, the
/// author, another signed-in user and no session at all, on every resource and operation (the
/// blob rows in ``BlobChecks/rules(_:)``, the send to many's in ``BatchChecks/rules(_:)``).
enum RuleChecks {
    @Sendable static func run(_ context: AuditContext) async {
        let http = context.http
        let bob = context.bob!, alice = context.alice!, mallory = context.mallory!
        func cell(_ name: String, _ method: String, _ path: String, _ user: AuditUser?, body: Any? = nil, _ status: Int,
                  _ code: String? = nil) async {
            await context.check("rule.\(name)") {
                context.expect("rule.\(name)", try await http.call(method, path, session: user?.session, body: body), status, code)
            }
        }
        let document = "/v1/users/\(bob.uid)"
        await cell("document.owner-writes", "PUT", document, bob, body: ["theme": "dark"], 204)
        await cell("document.owner-reads", "GET", document, bob, 200)
        await cell("document.other-cannot-read", "GET", document, mallory, 403, "forbidden")
        await cell("document.other-cannot-write", "PUT", document, mallory, body: ["theme": "owned"], 403, "forbidden")
        await cell("document.other-cannot-delete", "DELETE", document, mallory, 403, "forbidden")
        await cell("document.anonymous-cannot-read", "GET", document, nil, 401)

        let keys = "/v1/users/\(bob.uid)/keys"
        let bundle = KeyBundle.make(uid: bob.uid, identity: IdentityKeyPair(), mailbox: MailboxKeyPair())
        await cell("keys.owner-publishes", "PUT", keys, bob, body: bundle, 204)
        await cell("keys.signed-in-user-reads", "GET", keys, mallory, 200)
        await cell("keys.other-cannot-replace", "PUT", keys, mallory,
                   body: KeyBundle.make(uid: bob.uid, identity: IdentityKeyPair(), mailbox: MailboxKeyPair()), 403, "forbidden")
        await cell("keys.other-cannot-delete", "DELETE", keys, mallory, 403, "forbidden")
        await cell("keys.anonymous-cannot-read", "GET", keys, nil, 401)

        // Messages: alice writes into bob's mailbox; mallory is a bystander.
        let id = MessageID.generate()
        let message = "/v1/users/\(bob.uid)/messages/\(id)"
        await context.check("rule.message.signed-in-user-creates") {
            let answer = try await context.send(alice, to: bob.uid, id: id)
            context.record("rule.message.signed-in-user-creates", answer.status == 201 && answer.json["author"] as? String == alice.uid,
                           "expected 201 stamped with the sender, got \(answer.summary) \(answer.json["author"] ?? "no author")")
        }
        await cell("message.anonymous-cannot-create", "PUT", "/v1/users/\(bob.uid)/messages/\(MessageID.generate())", nil,
                   body: ["envelope": Base64URL.encode(randomBytes(512))], 401)
        await cell("message.owner-reads", "GET", message, bob, 200)
        await cell("message.author-cannot-read", "GET", message, alice, 403, "forbidden")
        await cell("message.other-cannot-read", "GET", message, mallory, 403, "forbidden")
        await cell("message.owner-updates-metadata", "PATCH", message, bob, body: ["lease_seconds": 30, "lease_holder": "w1"], 200)
        await cell("message.author-cannot-update", "PATCH", message, alice, body: ["lease_seconds": 30], 403, "forbidden")
        await cell("message.other-cannot-update", "PATCH", message, mallory, body: ["lease_seconds": 30], 403, "forbidden")
        await cell("message.other-cannot-delete", "DELETE", message, mallory, 403, "forbidden")
        await cell("message.anonymous-cannot-delete", "DELETE", message, nil, 401)
        await cell("message.author-unsends", "DELETE", message, alice, 204)
        await cell("message.owner-finds-it-gone", "GET", message, bob, 404, "not_found")
        let second = MessageID.generate()
        _ = try? await context.send(alice, to: bob.uid, id: second)
        await cell("message.owner-acks", "DELETE", "/v1/users/\(bob.uid)/messages/\(second)", bob, 204)

        let mailbox = "/v1/users/\(bob.uid)/messages"
        await cell("mailbox.owner-lists", "GET", mailbox, bob, 200)
        await cell("mailbox.other-cannot-list", "GET", mailbox, mallory, 403, "forbidden")
        await cell("mailbox.author-cannot-list", "GET", mailbox, alice, 403, "forbidden")
        await cell("mailbox.anonymous-cannot-list", "GET", mailbox, nil, 401)
        await subscription(context, "mailbox.owner-subscribes", bob, expectReady: true)
        await subscription(context, "mailbox.other-cannot-subscribe", mallory, expectReady: false, closeCode: 4403)
        await subscription(context, "mailbox.anonymous-cannot-subscribe", nil, expectReady: false, closeCode: 4401)

        let blocked = "/v1/users/\(bob.uid)/blocked/\(mallory.uid)"
        await cell("block.other-cannot-block-for-the-owner", "PUT", "/v1/users/\(bob.uid)/blocked/\(alice.uid)", mallory, 403, "forbidden")
        await cell("block.owner-blocks", "PUT", blocked, bob, 204)
        await cell("block.owner-reads-the-list", "GET", "/v1/users/\(bob.uid)/blocked", bob, 200)
        await cell("block.other-cannot-read-the-list", "GET", "/v1/users/\(bob.uid)/blocked", mallory, 403, "forbidden")
        await cell("block.blocked-author-is-refused", "PUT", "/v1/users/\(bob.uid)/messages/\(MessageID.generate())", mallory,
                   body: ["envelope": Base64URL.encode(randomBytes(512))], 403, "blocked")
        await cell("block.other-cannot-unblock", "DELETE", blocked, mallory, 403, "forbidden")
        await cell("block.owner-unblocks", "DELETE", blocked, bob, 204)

        await prekeys(context)
        await push(context)
        await BlobChecks.rules(context)
        await BatchChecks.rules(context)
    }

    /// Push registrations and the push service (spec/protocol.md §4.22–§4.24): the owner's
    /// alone — another user gets the same 403 whether the registration exists or not — and the
    /// service is read by anyone signed in. The owner's own create needs a provider the relay has
    /// on (`GET /v1/push`); with none at all, only the refusals are checked.
    static func push(_ context: AuditContext) async {
        let http = context.http
        let bob = context.bob!, mallory = context.mallory!
        func cell(_ name: String, _ method: String, _ path: String, _ user: AuditUser?, body: Any? = nil, _ status: Int,
                  _ code: String? = nil) async {
            await context.check("rule.push.\(name)") {
                context.expect("rule.push.\(name)", try await http.call(method, path, session: user?.session, body: body), status, code)
            }
        }
        let list = "/v1/users/\(bob.uid)/push"
        let missing = "\(list)/\(Base64URL.encode(randomBytes(16)))"
        await cell("signed-in-user-reads-the-service", "GET", "/v1/push", mallory, 200)
        await cell("anonymous-cannot-read-the-service", "GET", "/v1/push", nil, 401)
        await cell("owner-lists", "GET", list, bob, 200)
        await cell("other-cannot-list", "GET", list, mallory, 403, "forbidden")
        await cell("anonymous-cannot-list", "GET", list, nil, 401)
        await cell("other-cannot-register", "PUT", missing, mallory, body: ["provider": "webhook"], 403, "forbidden")
        await cell("anonymous-cannot-register", "PUT", missing, nil, body: ["provider": "webhook"], 401)
        await cell("owner-finds-none", "GET", missing, bob, 404, "not_found")

        // An existing registration answers another user exactly as a missing one does.
        await context.check("rule.push.other-learns-nothing") {
            let providers = try await http.call("GET", "/v1/push", session: bob.session).json["providers"] as? [String] ?? []
            let body: [String: Any]
            if providers.contains("webhook") {
                body = ["provider": "webhook"]
            } else if providers.contains("fcm") {
                body = ["provider": "fcm", "token": "audit:" + Base64URL.encode(randomBytes(16))]
            } else if providers.contains("apns") {
                body = ["provider": "apns", "token": randomBytes(32).map { String(format: "%02x", $0) }.joined()]
            } else if providers.contains("webpush") {
                // A public-looking endpoint, never called (the registration is deleted before any
                // message could wake it); p256dh is RFC 8291 Appendix A's public test key.
                body = ["provider": "webpush", "endpoint": "https://push.example.net/audit/" + Base64URL.encode(randomBytes(16)),
                        "p256dh": "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4",
                        "auth": Base64URL.encode(randomBytes(16))]
            } else {
                return context.skip("rule.push.other-learns-nothing", "no push provider on: nothing can be registered")
            }
            let existing = "\(list)/\(Base64URL.encode(randomBytes(16)))"
            let created = try await http.call("PUT", existing, session: bob.session, body: body)
            guard created.status == 201 else {
                return context.record("rule.push.other-learns-nothing", false, "the owner's registration answered \(created.summary)")
            }
            var failure: String?
            for method in ["GET", "DELETE", "PUT"] where failure == nil {
                let there = try await http.call(method, existing, session: mallory.session, body: method == "PUT" ? body : nil)
                let absent = try await http.call(method, missing, session: mallory.session, body: method == "PUT" ? body : nil)
                if there.status != 403 || there.body != absent.body {
                    failure = "\(method): an existing registration answered \(there.summary), a missing one \(absent.summary)"
                }
            }
            let still = try await http.call("GET", existing, session: bob.session)
            _ = try await http.call("DELETE", existing, session: bob.session)
            if failure == nil, still.status != 200 { failure = "after the refusals the owner's registration answered \(still.summary)" }
            context.record("rule.push.other-learns-nothing", failure == nil, failure ?? "")
        }
    }

    /// One-time prekeys (spec/protocol.md §4.14): only the owner uploads, counts and withdraws
    /// them; any signed-in user claims one, and a claimed one is gone for good.
    static func prekeys(_ context: AuditContext) async {
        let http = context.http
        let bob = context.bob!, alice = context.alice!, mallory = context.mallory!
        let path = "/v1/users/\(bob.uid)/prekeys"
        func upload(_ ids: ClosedRange<Int>) -> [String: Any] {
            ["prekeys": ids.map { ["id": $0, "key": Base64URL.encode(MailboxKeyPair().publicKey.bytes)] }]
        }
        func count() async throws -> Int? {
            try await http.call("GET", path, session: bob.session).json["count"] as? Int
        }
        func claim(_ user: AuditUser?) async throws -> AuditHTTP.Answer {
            try await http.call("POST", path + "/claim", session: user?.session, body: [String: Any]())
        }
        await context.check("rule.prekeys.owner-uploads") {
            _ = try await http.call("DELETE", path, session: bob.session)
            let answer = try await http.call("POST", path, session: bob.session, body: upload(1...3))
            context.record("rule.prekeys.owner-uploads", answer.status == 200 && answer.json["count"] as? Int == 3,
                           "expected 200 with count 3, got \(answer.summary) \(answer.json["count"] ?? "no count")")
        }
        await context.check("rule.prekeys.other-cannot-upload") {
            context.expect("rule.prekeys.other-cannot-upload", try await http.call("POST", path, session: mallory.session, body: upload(100...100)),
                           403, "forbidden")
        }
        await context.check("rule.prekeys.other-cannot-count") {
            context.expect("rule.prekeys.other-cannot-count", try await http.call("GET", path, session: mallory.session), 403, "forbidden")
        }
        await context.check("rule.prekeys.other-cannot-delete") {
            let answer = try await http.call("DELETE", path, session: mallory.session)
            let left = try await count()
            context.record("rule.prekeys.other-cannot-delete", answer.status == 403 && answer.code == "forbidden" && left == 3,
                           "expected 403 forbidden and 3 prekeys left, got \(answer.summary) and \(left.map(String.init) ?? "no count")")
        }
        await context.check("rule.prekeys.anonymous-cannot-claim") {
            context.expect("rule.prekeys.anonymous-cannot-claim", try await claim(nil), 401)
        }
        // Three claims take the three prekeys, each once, lowest id first, the count going down with
        // each; the fourth finds none.
        await context.check("rule.prekeys.claim-consumes") {
            var ids: [Int] = [], counts: [Int?] = []
            for user in [alice, mallory, alice] {
                let answer = try await claim(user)
                guard answer.status == 200, let prekey = answer.json["prekey"] as? [String: Any], let id = prekey["id"] as? Int else {
                    return context.record("rule.prekeys.claim-consumes", false, "a claim answered \(answer.summary) \(answer.text.prefix(200))")
                }
                ids.append(id)
                counts.append(try await count())
            }
            guard counts == [2, 1, 0] else {
                return context.record("rule.prekeys.claim-consumes", false, "the count after each claim: \(counts), not [2, 1, 0]")
            }
            let last = try await claim(alice)
            let left = try await count()
            context.record("rule.prekeys.claim-consumes",
                           ids == [1, 2, 3] && last.status == 200 && last.json["prekey"] is NSNull && left == 0,
                           "expected ids [1, 2, 3], then none and a count of 0; got \(ids), \(last.summary) \(last.text.prefix(100)), \(left.map(String.init) ?? "no count")")
        }
        await cell(context, "prekeys.owner-withdraws", "DELETE", path, bob, 204)
    }

    private static func cell(_ context: AuditContext, _ name: String, _ method: String, _ path: String, _ user: AuditUser?, _ status: Int) async {
        await context.check("rule.\(name)") {
            context.expect("rule.\(name)", try await context.http.call(method, path, session: user?.session), status)
        }
    }

    /// Opens bob's subscription as `user`: the owner gets `ready`; anyone else an error frame
    /// and the close code of the refusal.
    static func subscription(_ context: AuditContext, _ name: String, _ user: AuditUser?, expectReady: Bool,
                             closeCode: UInt16? = nil) async {
        await context.check("rule.\(name)") {
            let socket = RelaySocket.subscribe(base: context.target.relay, uid: context.bob.uid, session: user?.session)
            let first = try await socket.next(timeout: .seconds(10))
            if expectReady {
                context.record("rule.\(name)", first?.type == "ready", "first frame: \(first?.type ?? "none")")
                await socket.close()
            } else {
                let code = await socket.closeCode(timeout: .seconds(10))
                context.record("rule.\(name)", first?.type == "error" && code == closeCode,
                               "expected an error frame and close \(closeCode ?? 0), got \(first?.type ?? "no frame") and close \(code.map(String.init) ?? "none (still open)")")
            }
        }
    }
}

extension KeyBundle {
    /// A signed bundle for `uid`, as JSON for a request body.
    static func make(uid: String, identity: IdentityKeyPair, mailbox: MailboxKeyPair) -> Data {
        Data(KeyBundle(uid: uid, identity: identity, mailboxKey: mailbox.publicKey).encoded())
    }
}
