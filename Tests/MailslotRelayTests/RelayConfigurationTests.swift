import Foundation
import MailslotTestSupport
import MailslotWire
import Testing
@testable import MailslotRelay

/// The relay's configuration is one typed, validated value: `serve`'s flags and variables reach it
/// through ``RelayConfiguration/settings`` only, and what cannot run is refused with a sentence.
@Suite struct RelayConfigurationTests {
    func configured(_ flags: [String: String], environment: [String: String] = [:]) throws -> RelayConfiguration {
        try RelayConfiguration(flags: flags, environment: environment)
    }

    /// The sentence that refuses `flags` and `environment`; nil when they are accepted.
    func refusal(_ flags: [String: String], environment: [String: String] = [:]) -> String? {
        do {
            _ = try configured(flags, environment: environment)
            return nil
        } catch {
            return "\(error)"
        }
    }

    @Test func theDefaultsRunOnceAnIssuerIsTrusted() throws {
        var configuration = RelayConfiguration()
        #expect(configuration.problems == [RelayConfiguration.noIssuerKey])
        configuration.issuerKeys = [IdentityKeyPair().publicKey]
        #expect(configuration.problems.isEmpty)
        #expect(configuration.durability == .normal)
    }

    @Test func bodyAndFrameLimitsFollowTheEnvelopeLimit() throws {
        let configuration = try configured(["max-envelope-bytes": "1048576"])
        #expect(configuration.maxEnvelopeBytes == 1 << 20)
        #expect(configuration.maxBodyBytes == (1 << 20) * 4 / 3 + 4096, "the base64url text of the largest envelope, and its JSON")
        #expect(configuration.maxFrameBytes == configuration.maxBodyBytes)
        #expect(RelayConfiguration().maxFrameBytes == Defaults.maxEnvelopeBytes * 4 / 3 + 4096)
    }

    @Test func flagsWinOverVariablesAndEverySettingIsTyped() throws {
        let key = IdentityKeyPair().publicKey, other = IdentityKeyPair().publicKey
        let configuration = try configured(
            ["listen": "[::1]:9090", "durability": "full", "create-rate": "2.5", "session-ttl": "120", "issuer-public-key": key.paserk],
            environment: ["MAILSLOT_LISTEN": "0.0.0.0:1", "MAILSLOT_MAX_PENDING": "7", "MAILSLOT_AUDIENCE": "",
                          "MAILSLOT_ISSUER_PUBLIC_KEY": "\(other.paserk), \(key.paserk)"])
        #expect(configuration.host == "::1" && configuration.port == 9090, "the flag, not the variable")
        #expect(configuration.durability == .full)
        #expect(configuration.createRate == 2.5)
        #expect(configuration.sessionLifetime == 120)
        #expect(configuration.maxPendingPerMailbox == 7, "a variable where no flag is given")
        #expect(configuration.audience == Defaults.audience, "an empty variable is unset")
        #expect(configuration.issuerKeys == [key])
        let rotating = try configured([:], environment: ["MAILSLOT_ISSUER_PUBLIC_KEY": "\(other.paserk), \(key.paserk)"])
        #expect(rotating.issuerKeys == [other, key], "several keys at once, comma-separated")
        // Every setting writes back as it was read.
        for setting in RelayConfiguration.settings {
            guard let text = setting.value(configuration) else { continue }
            #expect(setting.value(try configured([setting.flag: text])) == text, "--\(setting.flag) \(text)")
        }
    }

    /// Values out of range and combinations that contradict each other are refused, each with a
    /// sentence naming what to change.
    @Test func invalidSettingsAndCombinationsAreRefused() {
        let refused: [([String: String], String)] = [
            (["max-envelope-bytes": "1000"], "power of two"),
            (["max-envelope-bytes": "256"], "power of two"),
            (["max-envelope-bytes": "2097152"], "power of two"),
            (["durability": "sometimes"], "normal or full"),
            (["listen": "8080"], "HOST:PORT"),
            (["listen": "127.0.0.1:70000"], "HOST:PORT"),
            (["max-pending": "many"], "--max-pending (MAILSLOT_MAX_PENDING) takes a number"),
            (["max-pending": "0"], "--max-pending (MAILSLOT_MAX_PENDING) must be at least 1"),
            (["header-timeout": "inf"], "--header-timeout (MAILSLOT_HEADER_TIMEOUT) takes a number, not 'inf'"),
            (["create-rate": "nan"], "--create-rate (MAILSLOT_CREATE_RATE) takes a number"),
            (["session-ttl": "30"], "--session-ttl (MAILSLOT_SESSION_TTL) must be at least 60"),
            (["issuer-public-key": "k4.public.nonsense"], "PASERK"),
            (["no-such-setting": "1"], "there is no setting --no-such-setting"),
            (["session-ttl": "7200", "refresh-ttl": "3600"], "the session lifetime (7200 s) is longer than the refresh lifetime (3600 s)"),
            (["message-ttl": "7200", "max-message-ttl": "3600"], "the default message lifetime (7200 s) is longer than the maximum (3600 s)"),
            (["max-message-ttl": "2592001"], "the longest message lifetime (2592001 s) is over 2592000 s (30 days)"),
            (["max-envelope-bytes": "1048576", "max-author-bytes": "65536"], "must be at least the largest envelope"),
            (["relays": "0"], "--relays (MAILSLOT_RELAYS) must be from 1 to 1000, not '0'"),
            (["relays": "1001"], "--relays (MAILSLOT_RELAYS) must be from 1 to 1000, not '1001'"),
            (["relays": "9223372036854775807"], "--relays (MAILSLOT_RELAYS) must be from 1 to 1000"),
        ]
        for (flags, sentence) in refused {
            let refusal = refusal(flags)
            #expect(refusal?.contains(sentence) == true, "\(flags): \(refusal ?? "accepted")")
        }
        #expect(refusal(["max-pending": "5"], environment: ["MAILSLOT_MAX_PENDING": "none"]) == nil, "the flag wins: the variable is not read")
        #expect(refusal([:], environment: ["MAILSLOT_WINDOW": "0"])?.contains("MAILSLOT_WINDOW") == true, "a variable is checked as its flag is")
        #expect(refusal(["relays": "1000"]) == nil, "1000 relays is the most")
        var inCode = RelayConfiguration()
        inCode.relays = Int.max
        #expect(inCode.problems.contains("the number of relays must be from 1 to 1000, not \(Int.max)."), "made in code: \(inCode.problems)")
    }

    /// A relay built from a configuration made in code refuses it just the same: tests and
    /// embedders cannot start what `serve` would refuse as contradictory.
    @Test func aRelayRefusesAnInvalidConfiguration() throws {
        var configuration = TestRelay.configuration(issuer: IdentityKeyPair(), dataDirectory: "/nonexistent/never-created")
        configuration.maxEnvelopeBytes = 1000
        configuration.sessionLifetime = 10
        configuration.refreshLifetime = 5
        configuration.idleTimeout = .infinity
        let error = #expect(throws: RelayConfigurationError.self) { _ = try Relay(configuration: configuration, logger: TestRelay.logger) }
        for problem in ["power of two", "refresh lifetime", "idle timeout"] {
            #expect(error?.description.contains(problem) == true, "every problem at once: \(error?.description ?? "")")
        }
        #expect(!FileManager.default.fileExists(atPath: "/nonexistent/never-created"), "refused before touching the disk")
    }
}
