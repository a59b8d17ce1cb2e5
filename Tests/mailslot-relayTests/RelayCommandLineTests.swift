import Foundation
import MailslotCrypto
import MailslotTestSupport
import Testing

/// Runs the built `mailslot-relay` binary as a user would, checking output and exit codes.
@Suite struct RelayCommandLineTests {
    func run(_ arguments: String...) async throws -> ProcessResult {
        try await ProcessRunner.run(ProcessRunner.builtProduct("mailslot-relay"), arguments)
    }

    func temporaryFolder() throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("mailslot-cli-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    @Test func keygenPrintsAConsistentPair() async throws {
        let result = try await run("keygen", "--json")
        #expect(result.status == 0)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: String])
        let pair = try IdentityKeyPair(paserk: try #require(object["secret_key"]))
        #expect(pair.publicKey.paserk == object["public_key"])
        #expect(pair.publicKey.paserkID == object["kid"])
    }

    @Test func keygenWritesAPrivateFileAndMintedTokensVerify() async throws {
        let folder = try temporaryFolder()
        defer { try? FileManager.default.removeItem(at: folder) }
        let keyFile = folder.appendingPathComponent("issuer.key").path
        let keygen = try await run("keygen", "--secret-key-file", keyFile)
        #expect(keygen.status == 0)
        #expect(!keygen.stdout.contains("k4.secret"), "the secret goes to the file only")
        let mode = try FileManager.default.attributesOfItem(atPath: keyFile)[.posixPermissions] as? Int
        #expect(mode == 0o600)
        let publicKey = try IdentityPublicKey(paserk: try #require(
            keygen.stdout.split(separator: "\n").first { $0.hasPrefix("public_key: ") }?.dropFirst(12).description))

        let mint = try await run("token", "mint", "--uid", "alice", "--ttl", "120", "--audience", "relay.test", "--jti", "j1",
                           "--issuer-secret-key", keyFile)
        #expect(mint.status == 0, "\(mint.stderr)")
        #expect(mint.stderr.isEmpty)
        let token = mint.stdout.trimmingCharacters(in: .newlines)
        let verified = try TokenVerifier(issuerKeys: [publicKey], audience: "relay.test").verify(token)
        #expect(verified.uid == "alice")
        #expect(verified.tokenID == "j1")
        #expect(verified.expiresAt - verified.issuedAt == 120)

        let checked = try await run("token", "verify", token, "--issuer-public-key", publicKey.paserk, "--audience", "relay.test")
        #expect(checked.status == 0)
        #expect(checked.stdout.contains("uid: alice"))
        let refused = try await run("token", "verify", token, "--issuer-public-key", publicKey.paserk)
        #expect(refused.status == 65)
        #expect(refused.stderr.contains("token refused: token_wrong_audience"))
        #expect(!refused.stderr.contains(token), "never echoes the token")

        let again = try await run("keygen", "--secret-key-file", keyFile)
        #expect(again.status == 73, "never overwrites a key")
        #expect(again.stderr.contains("already exists"))
    }

    /// `keygen --vapid FILE --webhook-secret FILE`: new files, mode 0600, never over an existing
    /// one; the VAPID public key printed (65-byte uncompressed point), no secret printed.
    @Test func keygenWritesPushKeys() async throws {
        let folder = try temporaryFolder()
        defer { try? FileManager.default.removeItem(at: folder) }
        let vapid = folder.appendingPathComponent("vapid.pem").path, webhook = folder.appendingPathComponent("webhook").path
        let keygen = try await run("keygen", "--vapid", vapid, "--webhook-secret", webhook, "--json")
        #expect(keygen.status == 0, "\(keygen.stderr)")
        let printed = try #require(try JSONSerialization.jsonObject(with: Data(keygen.stdout.utf8)) as? [String: String])
        #expect(Set(printed.keys) == ["vapid_key_file", "vapid_public_key", "webhook_secret_file"])
        let point = try #require(Base64URL.decode(printed["vapid_public_key"] ?? ""))
        #expect(point.count == 65 && point.first == 4)
        for path in [vapid, webhook] {
            #expect(try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int == 0o600, "\(path)")
        }
        let pem = try String(contentsOfFile: vapid, encoding: .utf8)
        #expect(pem.hasPrefix("-----BEGIN PRIVATE KEY-----\n") && pem.hasSuffix("-----END PRIVATE KEY-----\n"), "PKCS#8 PEM")
        let secret = try String(contentsOfFile: webhook, encoding: .utf8)
        #expect(secret.hasPrefix("whsec_") && Data(base64Encoded: String(secret.dropFirst(6).dropLast()))?.count == 32)
        #expect(!keygen.stdout.contains("PRIVATE") && !keygen.stdout.contains("whsec_"), "no secret printed")
        let again = try await run("keygen", "--vapid", vapid)
        #expect(again.status == 73 && again.stderr.contains("already exists"), "never overwrites a key")
        #expect(try String(contentsOfFile: vapid, encoding: .utf8) == pem)
        #expect(try await run("keygen", "--vapid", folder.appendingPathComponent("v2").path, "--secret-key-file", vapid).status == 64)
    }

    @Test func mintRefusesBadArgumentsWithUsageCode() async throws {
        let folder = try temporaryFolder()
        defer { try? FileManager.default.removeItem(at: folder) }
        let keyFile = folder.appendingPathComponent("issuer.key").path
        #expect(try await run("keygen", "--secret-key-file", keyFile).status == 0)

        let badUID = try await run("token", "mint", "--uid", "a/b", "--issuer-secret-key", keyFile)
        #expect(badUID.status == 64)
        #expect(badUID.stderr.contains("not a valid uid"))
        #expect(badUID.stdout.isEmpty)
        let longTTL = try await run("token", "mint", "--uid", "alice", "--ttl", "3601", "--issuer-secret-key", keyFile)
        #expect(longTTL.status == 64)
        #expect(longTTL.stderr.contains("--ttl must be between 1 and 3600"))
        #expect(try await run("token", "mint", "--uid", "alice", "--ttl", "0", "--issuer-secret-key", keyFile).status == 64)
        #expect(try await run("token", "mint", "--uid", "alice").status == 64, "the key file is required")
    }

    @Test func mintExplainsEveryKeyFileProblem() async throws {
        let folder = try temporaryFolder()
        defer { try? FileManager.default.removeItem(at: folder) }

        let missing = try await run("token", "mint", "--uid", "alice", "--issuer-secret-key", folder.appendingPathComponent("nope").path)
        #expect(missing.status == 66)
        #expect(missing.stderr.contains("does not exist"))

        // A folder in place of the file cannot be read, whoever runs the test (root included).
        let unreadable = try await run("token", "mint", "--uid", "alice", "--issuer-secret-key", folder.path)
        #expect(unreadable.status == 77)
        #expect(unreadable.stderr.contains("cannot be read"))

        let publicOnly = folder.appendingPathComponent("public.key")
        try Data((IdentityKeyPair().publicKey.paserk + "\n").utf8).write(to: publicOnly)
        let wrongType = try await run("token", "mint", "--uid", "alice", "--issuer-secret-key", publicOnly.path)
        #expect(wrongType.status == 65)
        #expect(wrongType.stderr.contains("expected one line `k4.secret.…`"))
        #expect(!wrongType.stderr.contains("k4.public."), "never echoes the file")

        let truncated = folder.appendingPathComponent("short.key")
        try Data(String(IdentityKeyPair().paserk.dropLast(4)).utf8).write(to: truncated)
        let short = try await run("token", "mint", "--uid", "alice", "--issuer-secret-key", truncated.path)
        #expect(short.status == 65)
        #expect(short.stderr.contains("not 64 bytes"))
        #expect(!short.stderr.contains("k4.secret."), "never echoes the secret")
    }
}
