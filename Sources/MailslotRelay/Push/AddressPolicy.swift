import Glibc
import NIOCore

/// Which Web Push endpoints and addresses the relay may call (spec/push.md §4.1,
/// docs/design/wakeups.md §3.4). A Web Push endpoint is the only URL a client gives the relay to
/// call, so without these checks a client could aim the relay at the operator's own network.
/// Pure: the registration checks what needs no DNS (``endpoint(_:)``); the provider, at each call,
/// checks every address the name resolved to (``permits(_:)``) and connects only to a checked one.
struct AddressPolicy: Sendable, Equatable {
    /// Lifts the address-range and name checks (`--push-allow-private-addresses`): tests on
    /// loopback, a distributor on a private network. Never the scheme, userinfo or port rules.
    let allowPrivateAddresses: Bool

    /// Why an endpoint is not taken.
    enum Refusal: Error, Equatable, Sendable {
        /// Not an absolute URL of the accepted grammar (`invalid_push_registration`, member `endpoint`).
        case invalid(String)
        /// A URL the relay will not call (`push_endpoint_refused`).
        case refused(String)
    }

    /// A Web Push endpoint that passed the registration's checks.
    struct Endpoint: Sendable, Equatable {
        /// The URL as the client gave it.
        let url: String
        /// `https`, or `http` (loopback, with private addresses allowed).
        let scheme: String
        /// The host in lowercase, an IPv6 literal without its brackets, a name without a final dot.
        let host: String
        /// The port, explicit or the scheme's.
        let port: Int
        /// Whether the host is an IP address rather than a name (nothing to resolve).
        let isAddressLiteral: Bool

        /// `host` or `host:port` when the port is not the scheme's (IPv6 in brackets): what
        /// pauses and per-host concurrency count by (the registration's `route`).
        var route: String {
            let shownHost = host.contains(":") ? "[\(host)]" : host
            return port == (scheme == "https" ? 443 : 80) ? shownHost : "\(shownHost):\(port)"
        }

        /// `scheme://host[:port]`: the VAPID token's audience (RFC 8292 §2).
        var origin: String { "\(scheme)://\(route)" }
    }

    /// The lowest port an endpoint may name, besides 443: below it are the well-known services
    /// of the operator's machines (SMTP, SSH, …).
    static let lowestPort = 1024

    /// Checks `text` as a Web Push endpoint, without DNS: an absolute `https` URL of at most
    /// 1 024 bytes of printable ASCII, no userinfo, no fragment, port 443 or 1024–65535, a host
    /// that is a DNS name or an IP literal; refused: an IP literal in a special range and the names
    /// `localhost`, `*.localhost`, `*.local`, `*.internal`, `home.arpa`, `*.home.arpa`, and a name
    /// without a dot (resolved through the relay's search domains). `http` only to a loopback host
    /// with private addresses allowed.
    func endpoint(_ text: String) throws(Refusal) -> Endpoint {
        let bytes = Array(text.utf8)
        guard bytes.count <= 1024 else { throw .invalid("longer than 1024 bytes") }
        guard bytes.allSatisfy({ (0x21...0x7E).contains($0) }) else { throw .invalid("not a URL: spaces, controls or non-ASCII characters") }
        guard let schemeEnd = text.range(of: "://") else { throw .invalid("not an absolute URL") }
        let scheme = text[..<schemeEnd.lowerBound].lowercased()
        guard !scheme.isEmpty, scheme.utf8.allSatisfy({ (97...122).contains($0) || (48...57).contains($0) || $0 == 43 || $0 == 45 || $0 == 46 }) else {
            throw .invalid("not an absolute URL")
        }
        guard scheme == "https" || scheme == "http" else { throw .refused("a Web Push endpoint must be an https:// URL") }
        let afterScheme = text[schemeEnd.upperBound...]
        if afterScheme.contains("#") { throw .refused("a Web Push endpoint may not carry a fragment") }
        let authority = afterScheme.prefix { $0 != "/" && $0 != "?" }
        if authority.contains("@") { throw .refused("a Web Push endpoint may not carry a user name or password") }
        guard !authority.isEmpty else { throw .invalid("a URL without a host") }

        var hostText: Substring
        var portText: Substring?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { throw .invalid("an IPv6 address without its closing bracket") }
            hostText = authority[authority.index(after: authority.startIndex)..<close]
            let rest = authority[authority.index(after: close)...]
            if !rest.isEmpty {
                guard rest.hasPrefix(":") else { throw .invalid("something after the IPv6 address that is not a port") }
                portText = rest.dropFirst()
            }
        } else if let colon = authority.firstIndex(of: ":") {
            hostText = authority[..<colon]
            portText = authority[authority.index(after: colon)...]
        } else {
            hostText = authority
        }
        var port = scheme == "https" ? 443 : 80
        if let portText {
            guard (1...5).contains(portText.count), portText.utf8.allSatisfy({ (48...57).contains($0) }), let value = Int(portText),
                  (1...65535).contains(value) else { throw .invalid("a port that is not a number from 1 to 65535") }
            port = value
        }

        let literal: IPAddress?
        var host: String
        if authority.hasPrefix("[") {
            guard let address = IPAddress(ipv6: String(hostText)) else { throw .invalid("a bracketed host that is not an IPv6 address") }
            literal = address
            host = String(hostText).lowercased()
        } else {
            host = hostText.lowercased()
            if host.hasSuffix(".") { host.removeLast() }
            guard !host.isEmpty else { throw .invalid("a URL without a host") }
            if Self.looksNumeric(host) {
                // What a URL parser or `getaddrinfo` reads as IPv4 (`127.1`, `0x7f.0.0.1`, `2130706433`)
                // is judged as that address, never as a name.
                guard let address = IPAddress(ipv4Text: host) else { throw .invalid("a host that is neither a name nor an IPv4 address") }
                literal = address
            } else {
                guard Self.isHostName(host) else { throw .invalid("a host that is not a DNS name (letters, digits, hyphens; no percent-encoding)") }
                literal = nil
            }
        }

        let loopback = literal?.isLoopback ?? Self.isLoopbackName(host)
        if scheme == "http" {
            guard allowPrivateAddresses, loopback else { throw .refused("a Web Push endpoint must be an https:// URL") }
        }
        guard port == 443 || port >= Self.lowestPort else {
            throw .refused("a Web Push endpoint's port must be 443 or from \(Self.lowestPort) to 65535")
        }
        if !allowPrivateAddresses {
            if let literal {
                guard !literal.isRefused else { throw .refused("a Web Push endpoint may not be a private, loopback or special address") }
            } else if let reason = Self.refusedNameReason(host) {
                throw .refused(reason)
            }
        }
        return Endpoint(url: text, scheme: scheme, host: literal.map(\.description) ?? host, port: port, isAddressLiteral: literal != nil)
    }

    /// Whether a call may connect to `address` (every address a name resolves to is asked).
    func permits(_ address: IPAddress) -> Bool { allowPrivateAddresses || !address.isRefused }

    /// Whether a call may connect to `address`: IPv4 and IPv6 as ``permits(_:)-(IPAddress)``, never a
    /// Unix socket.
    func permits(_ address: SocketAddress) -> Bool {
        guard let ip = IPAddress(address) else { return false }
        return permits(ip)
    }

    /// Whether `host` (a name or an IP literal, brackets allowed) is this machine: `localhost`,
    /// `*.localhost`, 127/8, `::1` (operator URLs may use `http://` to such a host).
    static func isLoopbackName(_ host: String) -> Bool {
        var name = host.lowercased()
        if name.hasPrefix("["), name.hasSuffix("]") { name = String(name.dropFirst().dropLast()) }
        if name.hasSuffix(".") { name.removeLast() }
        if name == "localhost" || name.hasSuffix(".localhost") { return true }
        if let address = IPAddress(ipv6: name) ?? (looksNumeric(name) ? IPAddress(ipv4Text: name) : nil) { return address.isLoopback }
        return false
    }

    /// Why a host name is refused without resolving it, or nil.
    static func refusedNameReason(_ host: String) -> String? {
        let special = ["localhost", "local", "internal", "home.arpa"]
        if special.contains(where: { host == $0 || host.hasSuffix("." + $0) }) {
            return "a Web Push endpoint may not name a local or internal host"
        }
        if !host.contains(".") { return "a Web Push endpoint's host must be a fully qualified name" }
        return nil
    }

    /// A DNS name of letters, digits and hyphens in dot-separated labels of 1–63 characters
    /// (at most 253 in all).
    static func isHostName(_ host: String) -> Bool {
        guard host.utf8.count <= 253 else { return false }
        return host.split(separator: ".", omittingEmptySubsequences: false).allSatisfy { label in
            (1...63).contains(label.utf8.count) && label.utf8.allSatisfy { (97...122).contains($0) || (48...57).contains($0) || $0 == 45 }
                && label.first != "-" && label.last != "-"
        }
    }

    /// Whether a host's last label is a number (decimal, or `0x` hex): the WHATWG URL rule for
    /// a host that must be parsed as IPv4.
    static func looksNumeric(_ host: String) -> Bool {
        guard let last = host.split(separator: ".", omittingEmptySubsequences: false).last, !last.isEmpty else { return false }
        if last.utf8.allSatisfy({ (48...57).contains($0) }) { return true }
        let lower = last.lowercased()
        return lower.hasPrefix("0x") && lower.dropFirst(2).utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
    }
}

/// An IPv4 or IPv6 address, as bytes in network order.
struct IPAddress: Sendable, Hashable, CustomStringConvertible {
    /// 4 bytes (IPv4) or 16 (IPv6).
    let bytes: [UInt8]

    /// An IPv4 address from its 32-bit value.
    init(ipv4 value: UInt32) {
        bytes = [UInt8(value >> 24), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)]
    }

    /// An address from 4 or 16 bytes; nil for another count.
    init?(bytes: [UInt8]) {
        guard bytes.count == 4 || bytes.count == 16 else { return nil }
        self.bytes = bytes
    }

    /// An IPv6 address from its text (RFC 4291 §2.2, including an embedded dotted IPv4 tail);
    /// nil for anything else, a zone id included.
    init?(ipv6 text: String) {
        var address = in6_addr()
        guard text.utf8.count <= 45, inet_pton(AF_INET6, text, &address) == 1 else { return nil }
        bytes = withUnsafeBytes(of: &address) { Array($0) }
    }

    /// An IPv4 address as URL parsers and `inet_aton` read it: one to four parts separated by
    /// dots, each decimal, octal (a leading 0) or hex (`0x`), the last filling the remaining
    /// bytes (`127.1` is 127.0.0.1). Nil for anything else or a part out of range.
    init?(ipv4Text text: String) {
        var parts = text.split(separator: ".", omittingEmptySubsequences: false)
        if parts.count > 1, parts.last?.isEmpty == true { parts.removeLast() }
        guard (1...4).contains(parts.count) else { return nil }
        var values: [UInt64] = []
        for part in parts {
            let lower = part.lowercased()
            let value: UInt64?
            if lower.hasPrefix("0x") {
                value = lower.count == 2 ? 0 : UInt64(lower.dropFirst(2), radix: 16)
            } else if lower.count > 1, lower.hasPrefix("0") {
                value = UInt64(lower.dropFirst(), radix: 8)
            } else {
                value = lower.isEmpty ? nil : UInt64(lower, radix: 10)
            }
            guard let value, lower.count <= 20 else { return nil }
            values.append(value)
        }
        let head = values.dropLast()
        guard head.allSatisfy({ $0 <= 255 }), let last = values.last, last < (UInt64(1) << (8 * (5 - values.count))) else { return nil }
        var value = last
        for (index, part) in head.enumerated() { value |= part << (8 * (3 - index)) }
        self.init(ipv4: UInt32(value))
    }

    /// The address of an IPv4 or IPv6 socket address; nil for a Unix socket.
    init?(_ address: SocketAddress) {
        switch address {
        case .v4(let v4):
            var raw = v4.address.sin_addr
            bytes = withUnsafeBytes(of: &raw) { Array($0) }
        case .v6(let v6):
            var raw = v6.address.sin6_addr
            bytes = withUnsafeBytes(of: &raw) { Array($0) }
        case .unixDomainSocket:
            return nil
        }
    }

    /// The IPv4 address an IPv6 address stands for, by embedding (spec/push.md §4.1): an
    /// IPv4-mapped address (`::ffff:0:0/96`) and NAT64's `64:ff9b::/96` (and `64:ff9b:1::/48`
    /// with the address in the last 32 bits) are judged as that IPv4 address.
    var embeddedIPv4: IPAddress? {
        guard bytes.count == 16 else { return nil }
        let mapped: [UInt8] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF]
        let nat64: [UInt8] = [0, 0x64, 0xFF, 0x9B, 0, 0, 0, 0, 0, 0, 0, 0]
        let localNat64: [UInt8] = [0, 0x64, 0xFF, 0x9B, 0, 1, 0, 0, 0, 0, 0, 0]
        let prefix = Array(bytes[0..<12])
        guard prefix == mapped || prefix == nat64 || prefix == localNat64 else { return nil }
        return IPAddress(bytes: Array(bytes[12..<16]))
    }

    /// Whether the relay refuses to call this address: IPv4 in a special-purpose range (RFC 6890
    /// and successors), IPv6 outside global unicast 2000::/3 or in its special parts, an
    /// embedded IPv4 address judged as itself.
    var isRefused: Bool {
        if bytes.count == 4 { return Self.refusedIPv4.contains { $0.contains(bytes) } }
        if let embedded = embeddedIPv4 { return embedded.isRefused }
        if bytes[0] & 0xE0 != 0x20 { return true }  // outside 2000::/3
        return Self.refusedIPv6.contains { $0.contains(bytes) }
    }

    /// Whether this is a loopback address: 127/8, `::1`, or a mapped 127/8.
    var isLoopback: Bool {
        if bytes.count == 4 { return bytes[0] == 127 }
        if let embedded = embeddedIPv4 { return embedded.isLoopback }
        return bytes == [UInt8](repeating: 0, count: 15) + [1]
    }

    /// Dotted quad, or RFC 5952 IPv6 text.
    var description: String {
        if bytes.count == 4 { return bytes.map(String.init).joined(separator: ".") }
        var raw = in6_addr()
        withUnsafeMutableBytes(of: &raw) { $0.copyBytes(from: bytes) }
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        guard inet_ntop(AF_INET6, &raw, &buffer, socklen_t(buffer.count)) != nil else { return "::" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// An address prefix: `bytes` and the number of leading bits that count.
    struct Prefix: Sendable {
        let bytes: [UInt8]
        let length: Int

        func contains(_ address: [UInt8]) -> Bool {
            guard address.count == bytes.count else { return false }
            var remaining = length
            for index in bytes.indices where remaining > 0 {
                let bits = min(8, remaining)
                let mask = UInt8(truncatingIfNeeded: 0xFF << (8 - bits))
                if address[index] & mask != bytes[index] & mask { return false }
                remaining -= bits
            }
            return true
        }
    }

    /// The IPv4 ranges refused (design §3.4).
    static let refusedIPv4: [Prefix] = [
        ([0, 0, 0, 0], 8), ([10, 0, 0, 0], 8), ([100, 64, 0, 0], 10), ([127, 0, 0, 0], 8), ([169, 254, 0, 0], 16),
        ([172, 16, 0, 0], 12), ([192, 0, 0, 0], 24), ([192, 0, 2, 0], 24), ([192, 88, 99, 0], 24), ([192, 168, 0, 0], 16),
        ([198, 18, 0, 0], 15), ([198, 51, 100, 0], 24), ([203, 0, 113, 0], 24), ([224, 0, 0, 0], 4), ([240, 0, 0, 0], 4),
    ].map { Prefix(bytes: $0.0, length: $0.1) }

    /// The parts of 2000::/3 refused: 2001::/23 (IETF protocol assignments: Teredo, ORCHID,
    /// benchmarking, …), 2001:db8::/32 (documentation), 2002::/16 (6to4, which embeds any IPv4 address).
    static let refusedIPv6: [Prefix] = [
        ([0x20, 0x01, 0, 0], 23), ([0x20, 0x01, 0x0D, 0xB8], 32), ([0x20, 0x02, 0, 0], 16),
    ].map { Prefix(bytes: $0.0 + [UInt8](repeating: 0, count: 12), length: $0.1) }
}
