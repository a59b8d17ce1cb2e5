import Foundation
import MailslotWire

/// Attempts to reach another user's data by bending the path or the body: dot segments, encoded
/// slashes, case and Unicode variants of uids, NUL bytes, duplicate JSON members, over-long ids,
/// and a claimed author.
enum BypassChecks {
    @Sendable static func run(_ context: AuditContext) async {
        let bob = context.bob!, alice = context.alice!, mallory = context.mallory!
        // Something in bob's mailbox, so that a bypass would have something to show.
        _ = try? await context.send(alice, to: bob.uid)

        func refused(_ name: String, _ path: String, as user: AuditUser, raw: Bool = false, expected: Set<Int> = [400, 403, 404]) async {
            await context.check("bypass.\(name)") {
                let status: Int?
                if raw {
                    guard let connection = try context.rawConnection() else {
                        return context.skip("bypass.\(name)", "needs a plain-HTTP connection to the relay")
                    }
                    connection.send("GET \(path) HTTP/1.1\r\nHost: relay\r\nAuthorization: Bearer \(user.session)\r\nConnection: close\r\n\r\n")
                    status = await connection.status()
                } else {
                    status = try await context.http.call("GET", path, session: user.session).status
                }
                context.record("bypass.\(name)", status.map(expected.contains) ?? false,
                               "expected one of \(expected.sorted()), got \(status.map(String.init) ?? "no answer")")
            }
        }
        await refused("dot-dot-segments", "/v1/users/\(mallory.uid)/../\(bob.uid)/messages", as: mallory, raw: true)
        await refused("dot-dot-as-uid", "/v1/users/../users/\(bob.uid)/messages", as: mallory, raw: true)
        await refused("percent-encoded-slash", "/v1/users/\(mallory.uid)%2F..%2F\(bob.uid)/messages", as: mallory, raw: true)
        await refused("percent-encoded-dot-dot", "/v1/users/%2E%2E/\(bob.uid)/messages", as: mallory, raw: true)
        await refused("upper-case-variant-is-another-user", "/v1/users/\(bob.uid.uppercased())/messages", as: bob, expected: [403])
        let fullwidth = String(String.UnicodeScalarView(bob.uid.unicodeScalars.map {
            (0x61...0x7A).contains($0.value) ? Unicode.Scalar($0.value + 0xFEE0)! : $0
        }))
        await refused("unicode-fullwidth-variant", "/v1/users/\(fullwidth.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed) ?? "")/messages",
                      as: bob, expected: [400])
        await refused("nul-byte-in-uid", "/v1/users/\(bob.uid)%00/messages", as: bob, expected: [400])
        await refused("nul-byte-in-uid-other", "/v1/users/\(bob.uid)%00\(mallory.uid)/messages", as: mallory, expected: [400])
        await refused("space-in-uid", "/v1/users/\(bob.uid)%20/messages", as: bob, expected: [400])
        await refused("over-long-uid", "/v1/users/\(String(repeating: "u", count: 129))/messages", as: bob, expected: [400])
        await refused("over-long-message-id", "/v1/users/\(bob.uid)/messages/\(String(repeating: "M", count: 65))", as: bob, expected: [400])
        await refused("too-short-message-id", "/v1/users/\(bob.uid)/messages/short", as: bob, expected: [400])

        await context.check("bypass.duplicate-json-members") {
            let a = Base64URL.encode(randomBytes(512)), b = Base64URL.encode(randomBytes(512))
            let answer = try await context.http.call("PUT", "/v1/users/\(bob.uid)/messages/\(MessageID.generate())", session: alice.session,
                                                     body: #"{"envelope":"\#(a)","envelope":"\#(b)"}"#)
            context.expect("bypass.duplicate-json-members", answer, 400, "invalid_json")
        }
        await context.check("bypass.claimed-author-is-ignored") {
            let id = MessageID.generate()
            let answer = try await context.send(mallory, to: bob.uid, id: id, extra: ["author": alice.uid])
            let read = try await context.http.call("GET", "/v1/users/\(bob.uid)/messages/\(id)", session: bob.session)
            let author = read.json["author"] as? String
            context.record("bypass.claimed-author-is-ignored", answer.status == 400 || (answer.status == 201 && author == mallory.uid),
                           "send answered \(answer.summary); stored author \(author ?? "none")")
        }
    }
}
