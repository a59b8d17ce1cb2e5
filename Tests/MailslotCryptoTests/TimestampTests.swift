import Testing
@testable import MailslotCrypto

@Suite struct TimestampTests {
    @Test(arguments: [
        ("1970-01-01T00:00:00Z", 0.0), ("2022-01-01T00:00:00+00:00", 1_640_995_200), ("2000-02-29T12:00:00Z", 951_825_600),
        ("2022-01-01T01:00:00+01:00", 1_640_995_200), ("2021-12-31T23:00:00-01:00", 1_640_995_200),
        ("2022-01-01t00:00:00.5z", 1_640_995_200.5), ("1969-12-31T23:59:59Z", -1),
    ])
    func parses(text: String, seconds: Double) {
        #expect(Timestamp.parse(text) == seconds)
    }

    @Test(arguments: ["", "2022-01-01", "2022-01-01T00:00:00", "2022-13-01T00:00:00Z", "2021-02-29T00:00:00Z",
                      "2022-01-01T24:00:00Z", "2022-01-01T00:00:60Z", "2022-01-01T00:00:00.Z", "2022-01-01T00:00:00+0100",
                      "2022-01-01 00:00:00Z", "2022-01-01T00:00:00Zjunk", "+2022-01-01T00:00:00Z", "２０２２-01-01T00:00:00Z"])
    func refuses(text: String) {
        #expect(Timestamp.parse(text) == nil)
    }

    @Test func formatsAndParsesBack() {
        for seconds: Int64 in [0, 1, 951_825_600, 1_640_995_199, 4_102_444_800, -86_401] {
            let text = Timestamp.format(seconds)
            #expect(Timestamp.parse(text) == Double(seconds), "\(text)")
        }
        #expect(Timestamp.format(1_640_995_200) == "2022-01-01T00:00:00+00:00")
    }

    @Test(arguments: [
        (Int64(0), "1970-01-01T00:00:00.000Z"), (1_640_995_200_007, "2022-01-01T00:00:00.007Z"),
        (951_825_600_999, "2000-02-29T12:00:00.999Z"), (-1, "1969-12-31T23:59:59.999Z"),
        (253_402_300_799_120, "9999-12-31T23:59:59.120Z"), (-62_167_219_200_000, "0000-01-01T00:00:00.000Z"),
    ])
    func formatsMilliseconds(milliseconds: Int64, text: String) {
        #expect(Timestamp.format(milliseconds: milliseconds) == text)
        #expect(Timestamp.parse(text).map { ($0 * 1000).rounded() } == Double(milliseconds))
    }

    @Test func yearsBeyondFourDigitsStillFormat() {
        #expect(Timestamp.format(253_402_300_800) == "10000-01-01T00:00:00+00:00")
        #expect(Timestamp.format(milliseconds: 253_402_300_800_050) == "10000-01-01T00:00:00.050Z")
    }
}
