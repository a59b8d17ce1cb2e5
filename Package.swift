// swift-tools-version:6.0
// Mailslot — an end-to-end encrypted, ephemeral mailbox relay. docs/architecture.md describes the parts.
import PackageDescription

let package = Package(
    name: "mailslot",
    platforms: [.macOS(.v14)],
    products: [
        .library(name: "MailslotCrypto", targets: ["MailslotCrypto"]),
        .library(name: "MailslotWire", targets: ["MailslotWire"]),
        .library(name: "MailslotClient", targets: ["MailslotClient"]),
        .executable(name: "mailslot-relay", targets: ["mailslot-relay"]),
        .executable(name: "mailslot", targets: ["mailslot"]),
        .executable(name: "mailslot-audit", targets: ["mailslot-audit"]),
        .executable(name: "mailslot-bench", targets: ["mailslot-bench"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.80.0"),
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.20.0"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.0.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.0.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket", from: "2.0.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.0.0"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.4.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.0.0"),
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift", from: "0.1.0"),
        .package(url: "https://github.com/apple/swift-http-types", from: "1.0.0"),
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.0"),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        // Wake-ups' transport cryptography, which libsodium lacks: P-256 ECDH and ECDSA (Web Push,
        // VAPID, APNs' ES256), AES-128-GCM (RFC 8291) and RSA (FCM's RS256). Already in the build
        // through postgres-nio. Messages, sessions and files stay on libsodium.
        .package(url: "https://github.com/apple/swift-crypto.git", "3.12.3" ..< "5.0.0"),
        // The push providers' extra trust roots (--push-ca-file); already in the build through
        // async-http-client.
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.27.0"),
        // `swift package generate-documentation`: builds the DocC catalogs of MailslotClient,
        // MailslotRelay and MailslotCrypto (Sources/*/*.docc); tools/test fails on any warning.
        // A command plugin only: nothing of it is linked into a product.
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
    ],
    targets: [
        // libsodium, found through pkg-config. Every byte of cryptography goes through it.
        .systemLibrary(
            name: "CSodium",
            pkgConfig: "libsodium",
            providers: [.apt(["libsodium-dev"]), .brew(["libsodium"])]
        ),
        .target(name: "MailslotCrypto", dependencies: ["CSodium"]),
        .target(name: "MailslotWire", dependencies: ["MailslotCrypto"]),
        .target(
            name: "MailslotRelay",
            dependencies: [
                "MailslotWire",
                .product(name: "GRDB", package: "GRDB.swift"),
                // GRDB's own SQLite module: DirectStatement drives the hottest statements through it.
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                // HTTP/1 to Swift HTTP Types on the relay's own upgradable pipeline (Hummingbird's too).
                .product(name: "NIOHTTPTypesHTTP1", package: "swift-nio-extras"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                // The PostgreSQL store (Store/PostgreSQL/), for several relays sharing one database.
                .product(name: "PostgresNIO", package: "postgres-nio"),
                // The S3 object-store client (Blobs/S3/), for blobs several relays share.
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOPosix", package: "swift-nio"),
                // Part bodies stream from spool files (Blobs/S3/S3Client.swift).
                .product(name: "_NIOFileSystem", package: "swift-nio"),
                // Push/: Web Push encryption and VAPID, APNs and FCM tokens (spec/push.md).
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ]
        ),
        .target(
            name: "MailslotClient",
            dependencies: [
                "MailslotWire",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ]
        ),
        .executableTarget(
            name: "mailslot-relay",
            dependencies: [
                "MailslotRelay",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .executableTarget(
            name: "mailslot",
            dependencies: [
                "MailslotClient",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        // The black-box audit of a running relay: the checks (a library the security tests also run
        // against a deliberately broken relay) and the command.
        .target(
            name: "MailslotAudit",
            dependencies: [
                "MailslotWire",
                .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "tools/mailslot-audit/MailslotAudit"
        ),
        .executableTarget(
            name: "mailslot-audit",
            dependencies: ["MailslotAudit", .product(name: "ArgumentParser", package: "swift-argument-parser")],
            path: "tools/mailslot-audit/Command"
        ),
        // The load generator: real WebSocket senders and recipients against a spawned or remote relay.
        .executableTarget(
            name: "mailslot-bench",
            dependencies: [
                "MailslotWire",
                // FlushCoalescer, for the bench's own sockets.
                "MailslotRelay",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
                .product(name: "Histogram", package: "hdrhistogram-swift"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                // Commits per second of the database several relay nodes share (DatabaseProbe).
                .product(name: "PostgresNIO", package: "postgres-nio"),
                // Blob parts and downloads (`transfer`), streamed without copies.
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
            ],
            path: "tools/mailslot-bench"
        ),
        // An example bot on the public client API only.
        .executableTarget(name: "mailslot-echo-bot", dependencies: ["MailslotClient"], path: "Examples/EchoBot"),
        .testTarget(
            name: "MailslotCryptoTests",
            dependencies: ["MailslotCrypto"],
            exclude: ["Fixtures"]
        ),
        .testTarget(name: "MailslotWireTests", dependencies: ["MailslotWire"]),
        .testTarget(
            name: "MailslotRelayTests",
            dependencies: [
                "MailslotRelay", "MailslotTestSupport", "MailslotAudit",
                .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
                // The push tests' own opener and verifiers (Web Push decryption, ES256/RS256 checks).
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                // A fake S3 endpoint, and servers that refuse or never answer (S3ClientAnswerTests).
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                // ClusterTests' own connections (listening, pg_sleep).
                .product(name: "PostgresNIO", package: "postgres-nio"),
            ],
            // The AWS SigV4 test suite's case files, read from disk by SigV4Tests.
            exclude: ["Fixtures"]
        ),
        .testTarget(name: "MailslotClientTests", dependencies: [
            "MailslotClient", "MailslotRelay", "MailslotTestSupport",
            // The session tests read the client's store as a thief would.
            .product(name: "GRDB", package: "GRDB.swift"),
        ]),
        // The attack catalogue, against in-process relays; and a lying relay (a proxy in front of
        // one) against the client library.
        .testTarget(
            name: "SecurityTests",
            dependencies: [
                "MailslotRelay", "MailslotAudit", "MailslotTestSupport", "MailslotClient",
                "mailslot",  // the CLI's `receive` against the lying relay
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
                .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
                // The lying-relay tests change a client's store as a lost backup would.
                .product(name: "GRDB", package: "GRDB.swift"),
            ]
        ),
        .testTarget(name: "mailslotTests", dependencies: ["mailslot", "MailslotClient", "MailslotRelay", "MailslotTestSupport"]),
        // The testing module: `withTestRelay` (relays on port 0 on SQLite, PostgreSQL or several
        // sharing one database, torn down when their test ends) with typed HTTP and WebSocket
        // clients for them, a clock tests move, `eventually`, and the runner of the project's executables.
        .target(
            name: "MailslotTestSupport",
            dependencies: [
                "MailslotRelay", "MailslotAudit", "MailslotWire", .product(name: "Logging", package: "swift-log"),
                // A fresh PostgreSQL database per test (TestDatabase.swift).
                .product(name: "PostgresNIO", package: "postgres-nio"),
            ],
            path: "Tests/Support"
        ),
        .testTarget(name: "mailslot-relayTests", dependencies: ["mailslot-relay", "MailslotCrypto", "MailslotRelay", "MailslotTestSupport"]),
        .testTarget(name: "mailslot-benchTests", dependencies: ["mailslot-bench", "mailslot-relay", "MailslotTestSupport"]),
    ],
    swiftLanguageModes: [.v6]
)
