import Foundation
@testable import MailslotClient
import MailslotTestSupport
import MailslotWire
import Testing

/// The client library's push registrations against a relay that lies about them (``LyingRelay``):
/// an answer for another registration than the one asked for, or a list that repeats one, is a
/// bad answer (``ClientError/invalidResponse(detail:)``), and the target the app gave is kept for
/// the next sign-in (spec/push.md §2.1).
@Suite struct MaliciousPushRelayTests {
    static let id = "registration-one-0001"

    /// Whether `error` is ``ClientError/invalidResponse(detail:)``.
    static func isBadAnswer(_ error: ClientError?) -> Bool {
        if case .invalidResponse? = error { true } else { false }
    }

    @Test func aRegistrationAnsweredForAnotherIdProviderOrTagIsABadAnswerAndTheTargetIsKept() async throws {
        try await withLyingRelay(configure: { try PushTestCredentials.enableWebPushAndWebhook(&$0) }) { liar in
            let bob = try liar.client("bob")
            try await bob.signIn()
            let lies: [(String, String)] = [
                (#""id":"\#(Self.id)""#, #""id":"registration-two-0002""#),
                (#""provider":"webhook""#, #""provider":"fcm""#),
                (#""tag":"phone""#, #""tag":"another-phone""#),
            ]
            for (truth, lie) in lies {
                liar.lie("PUT", "/v1/users/bob/push/", times: 1, .rewrite { _, answer in
                    var answer = answer
                    let text = String(decoding: answer.body, as: UTF8.self)
                    answer.body = Data(text.replacingOccurrences(of: truth, with: lie).utf8)
                    return answer
                })
                let error = await #expect(throws: ClientError.self, "\(lie)") {
                    try await bob.registerPush(.webhook(token: "device 1"), id: Self.id, tag: "phone")
                }
                #expect(Self.isBadAnswer(error), "\(lie): \(String(describing: error))")
                #expect(try await bob.store.pushTargets().map(\.id) == [Self.id], "\(lie): kept for the next sign-in")
            }

            // A list that names one registration twice.
            liar.lie("GET", "/v1/users/bob/push", times: 1, .rewrite { _, answer in
                var answer = answer
                if var list = try? JSONSerialization.jsonObject(with: answer.body) as? [String: Any],
                   let registrations = list["registrations"] as? [Any] {
                    list["registrations"] = registrations + registrations
                    answer.body = (try? JSONSerialization.data(withJSONObject: list)) ?? answer.body
                }
                return answer
            })
            let error = await #expect(throws: ClientError.self) { try await bob.pushRegistrations() }
            #expect(Self.isBadAnswer(error), "\(String(describing: error))")

            liar.tellTheTruth()
            #expect(try await bob.pushRegistrations().map(\.id) == [Self.id], "the relay stored it; the truth shows it once")
            let registration = try await bob.registerPush(.webhook(token: "device 1"), id: Self.id, tag: "phone")
            #expect(registration.id == Self.id && registration.provider == .webhook && registration.tag == "phone")
        }
    }
}
