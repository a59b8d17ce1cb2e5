import Foundation
import Testing
@testable import MailslotRelay

/// Standard Webhooks 1.0 signatures (spec/push.md §5.4).
@Suite struct WebhookSignatureTests {
    // The Standard Webhooks specification's reference vector.
    static let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    static let id = "msg_p5jXN8AQM9LWM0D4loKWxJek"
    static let timestamp: Int64 = 1_614_265_330
    static let body = Array(#"{"test": 2432232314}"#.utf8)

    @Test func referenceVector() throws {
        let signer = WebhookSignature(secrets: [try .init(text: Self.secret)])
        #expect(signer.header(id: Self.id, timestamp: Self.timestamp, body: Self.body) == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
    }

    @Test func twoSecretsSignTwiceInFileOrder() throws {
        let secrets = try WebhookSignature.secrets(file: "# rotation\n\(Self.secret)\n\nwhsec_\(Data(repeating: 7, count: 32).base64EncodedString())\n")
        #expect(secrets.count == 2)
        let header = WebhookSignature(secrets: secrets).header(id: Self.id, timestamp: Self.timestamp, body: Self.body)
        let entries = header.split(separator: " ").map(String.init)
        #expect(entries.count == 2)
        #expect(entries[0] == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
        #expect(entries[1] == WebhookSignature(secrets: [secrets[1]]).header(id: Self.id, timestamp: Self.timestamp, body: Self.body))
        #expect(entries[1] != entries[0])
    }

    @Test func badSecretsAreRefused() {
        #expect(throws: PushKeyFileError.self) { try WebhookSignature.secrets(file: "\n# nothing\n") }
        #expect(throws: PushKeyFileError.self) { try WebhookSignature.Secret(text: "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw") }
        #expect(throws: PushKeyFileError.self) { try WebhookSignature.Secret(text: "whsec_c2hvcnQ=") }   // 5 bytes
        #expect(throws: PushKeyFileError.self) { try WebhookSignature.Secret(text: "whsec_not base64!") }
    }
}
