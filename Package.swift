// swift-tools-version:6.0
// Mailslot — an end-to-end encrypted, ephemeral mailbox relay. See DESIGN in README.md for the parts.
import PackageDescription

let package = Package(
    name: "mailslot",
    platforms: [.macOS(.v14)],
    products: [
        .library(name: "MailslotCrypto", targets: ["MailslotCrypto"]),
        .library(name: "MailslotWire", targets: ["MailslotWire"]),
        .executable(name: "mailslot-relay", targets: ["mailslot-relay"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
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
        .executableTarget(
            name: "mailslot-relay",
            dependencies: [
                "MailslotWire",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .testTarget(
            name: "MailslotCryptoTests",
            dependencies: ["MailslotCrypto"],
            exclude: ["Fixtures"]
        ),
        .testTarget(name: "MailslotWireTests", dependencies: ["MailslotWire"]),
        .testTarget(name: "mailslot-relayTests", dependencies: ["mailslot-relay", "MailslotCrypto"]),
    ],
    swiftLanguageModes: [.v6]
)
