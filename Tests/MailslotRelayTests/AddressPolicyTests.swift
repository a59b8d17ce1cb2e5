import NIOCore
import Testing
@testable import MailslotRelay

/// The Web Push address rules of spec/push.md §4.1 (design §3.4): every refused range at its
/// first and last address and just outside, the embedded IPv4 forms, the refused names, and the
/// URL rules (scheme, userinfo, fragment, port), with and without `--push-allow-private-addresses`.
@Suite struct AddressPolicyTests {
    static let strict = AddressPolicy(allowPrivateAddresses: false)
    static let lenient = AddressPolicy(allowPrivateAddresses: true)

    static func v4(_ text: String) throws -> IPAddress { try #require(IPAddress(ipv4Text: text), "\(text) parses") }
    static func v6(_ text: String) throws -> IPAddress { try #require(IPAddress(ipv6: text), "\(text) parses") }

    /// Each refused IPv4 range: its first and last address refused, the address before the first
    /// and after the last allowed (where those are not themselves in a refused range).
    @Test(arguments: [
        ("0.0.0.0", "0.255.255.255", nil, "1.0.0.0"),
        ("10.0.0.0", "10.255.255.255", "9.255.255.255", "11.0.0.0"),
        ("100.64.0.0", "100.127.255.255", "100.63.255.255", "100.128.0.0"),
        ("127.0.0.0", "127.255.255.255", "126.255.255.255", "128.0.0.0"),
        ("169.254.0.0", "169.254.255.255", "169.253.255.255", "169.255.0.0"),
        ("172.16.0.0", "172.31.255.255", "172.15.255.255", "172.32.0.0"),
        ("192.0.0.0", "192.0.0.255", "191.255.255.255", "192.0.1.0"),
        ("192.0.2.0", "192.0.2.255", "192.0.1.255", "192.0.3.0"),
        ("192.88.99.0", "192.88.99.255", "192.88.98.255", "192.88.100.0"),
        ("192.168.0.0", "192.168.255.255", "192.167.255.255", "192.169.0.0"),
        ("198.18.0.0", "198.19.255.255", "198.17.255.255", "198.20.0.0"),
        ("198.51.100.0", "198.51.100.255", "198.51.99.255", "198.51.101.0"),
        ("203.0.113.0", "203.0.113.255", "203.0.112.255", "203.0.114.0"),
        ("224.0.0.0", "239.255.255.255", "223.255.255.255", nil),
        ("240.0.0.0", "255.255.255.255", nil, nil),
    ] as [(String, String, String?, String?)])
    func ipv4RangeEdges(first: String, last: String, before: String?, after: String?) throws {
        #expect(try Self.v4(first).isRefused, "\(first)")
        #expect(try Self.v4(last).isRefused, "\(last)")
        if let before { #expect(try !Self.v4(before).isRefused, "\(before)") }
        if let after { #expect(try !Self.v4(after).isRefused, "\(after)") }
        #expect(try Self.lenient.permits(Self.v4(first)) && !Self.strict.permits(Self.v4(first)))
    }

    @Test func ipv6Ranges() throws {
        // Outside 2000::/3: everything, loopback, unspecified, ULA, link-local, multicast.
        for text in ["::", "::1", "1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "4000::", "fc00::1", "fdff::1", "fe80::1", "ff02::1", "::127.0.0.1"] {
            #expect(try Self.v6(text).isRefused, "\(text)")
        }
        // Global unicast is allowed, at its edges too.
        for text in ["2000::", "3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "2606:4700::1111", "2a00:1450:4001::200e"] {
            #expect(try !Self.v6(text).isRefused, "\(text)")
        }
        // 2001::/23, 2001:db8::/32, 2002::/16, each at its edges.
        for (first, last, before, after) in [("2001::", "2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff", "2000:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "2001:200::"),
                                             ("2001:db8::", "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", "2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", "2001:db9::"),
                                             ("2002::", "2002:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "2001:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "2003::")] {
            #expect(try Self.v6(first).isRefused && Self.v6(last).isRefused, "\(first) … \(last)")
            #expect(try !Self.v6(before).isRefused && !Self.v6(after).isRefused, "around \(first) … \(last)")
        }
    }

    /// IPv4-mapped and NAT64 addresses are judged by the IPv4 address they carry: a public one is
    /// allowed, a private one refused, whatever the IPv6 prefix says.
    @Test func embeddedIPv4IsJudgedAsIPv4() throws {
        for prefix in ["::ffff:", "64:ff9b::", "64:ff9b:1::"] {
            #expect(try Self.v6(prefix + "127.0.0.1").isRefused, "\(prefix)127.0.0.1")
            #expect(try Self.v6(prefix + "10.1.2.3").isRefused, "\(prefix)10.1.2.3")
            #expect(try Self.v6(prefix + "169.254.169.254").isRefused, "\(prefix)169.254.169.254")
            #expect(try !Self.v6(prefix + "93.184.216.34").isRefused, "\(prefix)93.184.216.34")
            #expect(try Self.v6(prefix + "127.0.0.1").isLoopback)
        }
        // Beside the NAT64 prefixes: outside 2000::/3, refused whatever they end in.
        #expect(try Self.v6("64:ff9b:2::93.184.216.34").isRefused)
        #expect(try Self.v6("::fffe:93.184.216.34").isRefused)
    }

    /// Every way `getaddrinfo` (inet_aton) and URL parsers read IPv4 is read here the same way.
    @Test func ipv4TextForms() throws {
        #expect(try Self.v4("127.1").description == "127.0.0.1")
        #expect(try Self.v4("0x7f.0.0.1").description == "127.0.0.1")
        #expect(try Self.v4("0177.0.0.1").description == "127.0.0.1")
        #expect(try Self.v4("2130706433").description == "127.0.0.1")
        #expect(try Self.v4("10.0x10203").description == "10.1.2.3")
        #expect(try Self.v4("93.184.216.34.").description == "93.184.216.34")
        for text in ["256.0.0.1", "1.2.3.4.5", "1.2.3.256", "1.2.65536", "4294967296", "08.1.1.1", "0x", "1..2.3", ""] where text != "0x" {
            #expect(IPAddress(ipv4Text: text) == nil, "\(text)")
        }
    }

    @Test func socketAddresses() throws {
        #expect(try !Self.strict.permits(SocketAddress(ipAddress: "127.0.0.1", port: 443)))
        #expect(try !Self.strict.permits(SocketAddress(ipAddress: "::ffff:192.168.1.1", port: 443)))
        #expect(try Self.strict.permits(SocketAddress(ipAddress: "93.184.216.34", port: 443)))
        #expect(try Self.strict.permits(SocketAddress(ipAddress: "2606:4700::1111", port: 443)))
        #expect(try Self.lenient.permits(SocketAddress(ipAddress: "127.0.0.1", port: 443)))
        #expect(try !Self.lenient.permits(SocketAddress(unixDomainSocketPath: "/tmp/x")), "never a Unix socket")
    }

    /// What a registration refuses without DNS, and what it takes.
    @Test func endpoints() throws {
        let good = try Self.strict.endpoint("https://Push.Example.NET/up/8f3Kq?x=1")
        #expect(good.host == "push.example.net" && good.port == 443 && good.scheme == "https" && !good.isAddressLiteral)
        #expect(good.route == "push.example.net" && good.origin == "https://push.example.net")
        let ported = try Self.strict.endpoint("https://push.example.net:8443/x")
        #expect(ported.route == "push.example.net:8443" && ported.origin == "https://push.example.net:8443")
        #expect(try Self.strict.endpoint("https://[2606:4700::1111]/x").route == "[2606:4700::1111]")
        #expect(try Self.strict.endpoint("https://93.184.216.34:1024/x").port == 1024)
        #expect(try Self.strict.endpoint("https://push.example.net./x").host == "push.example.net")

        let refused: [(String, String)] = [
            ("http://push.example.net/x", "https"), ("ftp://push.example.net/x", "https"),
            ("https://user@push.example.net/x", "user name"), ("https://u:p@push.example.net/x", "user name"),
            ("https://push.example.net/x#frag", "fragment"),
            ("https://push.example.net:80/x", "port"), ("https://push.example.net:1023/x", "port"), ("https://push.example.net:22/x", "port"),
            ("https://127.0.0.1/x", "private"), ("https://10.0.0.7/x", "private"), ("https://[::1]/x", "private"),
            ("https://[::ffff:10.0.0.1]/x", "private"), ("https://[fe80::1]/x", "private"), ("https://169.254.169.254/latest", "private"),
            ("https://127.1/x", "private"), ("https://0x7f000001/x", "private"), ("https://2130706433/x", "private"), ("https://0/x", "private"),
            ("https://localhost/x", "local"), ("https://LOCALHOST./x", "local"), ("https://a.localhost/x", "local"),
            ("https://printer.local/x", "local"), ("https://db.internal/x", "local"), ("https://nas.home.arpa/x", "local"),
            ("https://home.arpa/x", "local"), ("https://intranet/x", "fully qualified"),
        ]
        for (text, reason) in refused {
            do {
                _ = try Self.strict.endpoint(text)
                Issue.record("\(text) was taken")
            } catch .refused(let detail) {
                #expect(detail.contains(reason), "\(text): \(detail)")
            } catch {
                Issue.record("\(text): \(error), not refused")
            }
        }

        let invalid = ["push.example.net/x", "https://", "https:///x", "https://push example.net/x", "https://püsh.example.net/x",
                       "https://push.example.net:/x", "https://push.example.net:65536/x", "https://push.example.net:0x1bb/x",
                       "https://[::1/x", "https://[fe80::1%25eth0]/x", "https://[127.0.0.1]/x", "https://push%2Eexample.net/x",
                       "https://-push.example.net/x", "https://push..example.net/x", "https://1.2.3.256/x",
                       "https://push.example.net/" + String(repeating: "a", count: 1000)]
        for text in invalid {
            do {
                _ = try Self.strict.endpoint(text)
                Issue.record("\(text) was taken")
            } catch .invalid {
            } catch {
                Issue.record("\(text): \(error), not invalid")
            }
        }
        // 1 024 bytes exactly is taken.
        let longest = "https://push.example.net/" + String(repeating: "a", count: 1024 - 25)
        #expect(longest.utf8.count == 1024)
        #expect(throws: Never.self) { try Self.strict.endpoint(longest) }
    }

    /// `--push-allow-private-addresses` lifts the address and name checks and lets `http` reach a
    /// loopback host, but keeps the scheme for other hosts, userinfo, fragment and port rules.
    @Test func allowingPrivateAddresses() throws {
        #expect(try Self.lenient.endpoint("https://127.0.0.1:4443/x").isAddressLiteral)
        #expect(try Self.lenient.endpoint("https://10.0.0.7/x").host == "10.0.0.7")
        #expect(try Self.lenient.endpoint("https://localhost:4443/x").route == "localhost:4443")
        #expect(try Self.lenient.endpoint("http://127.0.0.1:8080/x").origin == "http://127.0.0.1:8080")
        #expect(try Self.lenient.endpoint("http://[::1]:8080/x").route == "[::1]:8080")
        #expect(try Self.lenient.endpoint("http://localhost:8080/x").scheme == "http")
        for text in ["http://10.0.0.7:8080/x", "http://push.example.net:8080/x", "https://u@127.0.0.1:4443/x",
                     "https://127.0.0.1:4443/x#f", "https://127.0.0.1:25/x", "http://127.0.0.1/x"] {
            #expect(throws: AddressPolicy.Refusal.self, "\(text)") { try Self.lenient.endpoint(text) }
        }
    }

    @Test func operatorURLs() {
        #expect(PushSettings.providerURLProblem("https://api.push.apple.com") == nil)
        #expect(PushSettings.providerURLProblem("http://127.0.0.1:9443") == nil)
        #expect(PushSettings.providerURLProblem("http://localhost:9443") == nil)
        #expect(PushSettings.providerURLProblem("http://[::1]:9443") == nil)
        #expect(PushSettings.providerURLProblem("http://fcm.example.com")?.contains("loopback") == true)
        #expect(PushSettings.providerURLProblem("ftp://x.example.com") != nil)
        #expect(PushSettings.providerURLProblem("https://u:p@x.example.com") != nil)
        #expect(PushSettings.providerURLProblem("not a url") != nil)
    }
}
