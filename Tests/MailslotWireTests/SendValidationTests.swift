import MailslotWire
import Testing

/// The one set of checks a create's fields pass, on the relay and in the fuzz target.
@Suite struct SendValidationTests {
    let id = "01KF0000000000000000000001"
    let envelope = Base64URL.encode([UInt8](repeating: 7, count: 512))

    /// The code `validation` refuses the fields with, or nil when it takes them.
    func code(_ validation: SendValidation, to recipient: String = "bob", id: String? = nil, envelope: String,
              ttlSeconds: Int64?, keyID: String?) -> ProblemCode? {
        do {
            _ = try validation.check(to: recipient, id: id ?? self.id, envelope: envelope, ttlSeconds: ttlSeconds, keyID: keyID)
            return nil
        } catch { return error.code }
    }

    @Test func eachFieldIsRefusedWithItsOwnCodeInTheRelaysOrder() {
        let validation = SendValidation()
        let checked = try? validation.check(to: "bob", id: id, envelope: envelope, ttlSeconds: nil, keyID: nil)
        #expect(checked?.ttl == Defaults.messageTTL)
        #expect(checked?.size == 512)
        #expect(code(validation, to: "b/ob", id: "short", envelope: "", ttlSeconds: 0, keyID: "x") == .invalidUID)
        #expect(code(validation, to: "bob", id: "short", envelope: "", ttlSeconds: 0, keyID: "x") == .invalidMessageID)
        #expect(code(validation, to: "bob", id: id, envelope: "", ttlSeconds: 0, keyID: "x") == .invalidTTL)
        #expect(code(validation, to: "bob", id: id, envelope: envelope, ttlSeconds: Defaults.maxMessageTTL + 1, keyID: nil) == .invalidTTL)
        #expect(code(validation, to: "bob", id: id, envelope: "", ttlSeconds: 60, keyID: "x") == .invalidEnvelope)
        #expect(code(validation, to: "bob", id: id, envelope: envelope + "=", ttlSeconds: 60, keyID: nil) == .invalidEnvelope)
        let oversized = Base64URL.encode([UInt8](repeating: 1, count: Defaults.maxEnvelopeBytes * 2))
        #expect(code(validation, to: "bob", id: id, envelope: oversized, ttlSeconds: 60, keyID: nil) == .envelopeTooLarge)
        let notAClass = Base64URL.encode([UInt8](repeating: 1, count: 600))
        #expect(code(validation, to: "bob", id: id, envelope: notAClass, ttlSeconds: 60, keyID: "x") == .invalidEnvelope)
        #expect(code(validation, to: "bob", id: id, envelope: envelope, ttlSeconds: 60, keyID: "x") == .invalidKeyID)
        let keyID = Base64URL.encode([UInt8](repeating: 9, count: 16))
        #expect(code(validation, to: "bob", id: id, envelope: envelope, ttlSeconds: 60, keyID: keyID) == nil)
    }

    @Test func theLimitsAreTheRelaysConfiguredOnes() {
        let small = SendValidation(maxEnvelopeBytes: 512, defaultTTL: 60, maxTTL: 120)
        #expect((try? small.check(to: "bob", id: id, envelope: envelope, ttlSeconds: nil, keyID: nil))?.ttl == 60)
        let larger = Base64URL.encode([UInt8](repeating: 1, count: 1024))
        #expect(code(small, to: "bob", id: id, envelope: larger, ttlSeconds: nil, keyID: nil) == .envelopeTooLarge)
        #expect(code(small, to: "bob", id: id, envelope: envelope, ttlSeconds: 121, keyID: nil) == .invalidTTL)
    }
}
