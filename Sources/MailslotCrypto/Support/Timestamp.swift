/// RFC 3339 date-times, the form PASETO registers for `iat`/`exp`/`nbf` and Mailslot uses for
/// every time in its formats. Times are whole or fractional seconds since the Unix epoch.
public enum Timestamp {
    /// Formats whole seconds since the epoch as `YYYY-MM-DDTHH:MM:SS+00:00`.
    public static func format(_ seconds: Int64) -> String {
        render(seconds: seconds, milliseconds: nil)
    }

    /// Formats milliseconds since the epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
    public static func format(milliseconds: Int64) -> String {
        let seconds = floorDiv(milliseconds, 1000)
        return render(seconds: seconds, milliseconds: milliseconds - seconds * 1000)
    }

    private static func render(seconds: Int64, milliseconds: Int64?) -> String {
        let days = floorDiv(seconds, 86_400)
        let secondOfDay = seconds - days * 86_400
        let (year, month, day) = civil(fromDays: days)
        let zone = milliseconds.map { "." + pad($0, 3) + "Z" } ?? "+00:00"
        guard (0...9999).contains(year) else {
            return pad(year, 4) + "-" + pad(month, 2) + "-" + pad(day, 2) + "T"
                + pad(secondOfDay / 3600, 2) + ":" + pad(secondOfDay / 60 % 60, 2) + ":" + pad(secondOfDay % 60, 2) + zone
        }
        // Every relay answer carries two or three of these: written into place, not concatenated.
        return String(unsafeUninitializedCapacity: 25) { text in
            func put(_ value: Int64, _ width: Int, at offset: Int) {
                var value = value
                for index in stride(from: offset + width - 1, through: offset, by: -1) {
                    text[index] = UInt8(truncatingIfNeeded: 48 + value % 10)
                    value /= 10
                }
            }
            put(year, 4, at: 0)
            text[4] = UInt8(ascii: "-")
            put(month, 2, at: 5)
            text[7] = UInt8(ascii: "-")
            put(day, 2, at: 8)
            text[10] = UInt8(ascii: "T")
            put(secondOfDay / 3600, 2, at: 11)
            text[13] = UInt8(ascii: ":")
            put(secondOfDay / 60 % 60, 2, at: 14)
            text[16] = UInt8(ascii: ":")
            put(secondOfDay % 60, 2, at: 17)
            guard let milliseconds else {
                for (index, byte) in "+00:00".utf8.enumerated() { text[19 + index] = byte }
                return 25
            }
            text[19] = UInt8(ascii: ".")
            put(milliseconds, 3, at: 20)
            text[23] = UInt8(ascii: "Z")
            return 24
        }
    }

    /// Parses an RFC 3339 date-time (`T` or `t`, `Z`/`z` or `±HH:MM`, optional fraction) into
    /// seconds since the epoch, or nil if it is not one. Leap seconds (`:60`) are refused.
    public static func parse(_ text: String) -> Double? {
        let b = Array(text.utf8)
        guard b.count >= 20, b.count <= 64 else { return nil }
        func number(_ range: Range<Int>) -> Int64? {
            var value: Int64 = 0
            for i in range {
                guard b[i] >= 48, b[i] <= 57 else { return nil }
                value = value * 10 + Int64(b[i] - 48)
            }
            return value
        }
        guard let year = number(0..<4), b[4] == 45, let month = number(5..<7), b[7] == 45,
              let day = number(8..<10), b[10] == 84 || b[10] == 116,
              let hour = number(11..<13), b[13] == 58, let minute = number(14..<16), b[16] == 58,
              let second = number(17..<19) else { return nil }
        guard (1...12).contains(month), day >= 1, day <= daysIn(month: month, year: year),
              hour < 24, minute < 60, second < 60 else { return nil }
        var index = 19
        var fraction = 0.0
        if b[index] == 46 {  // "."
            var scale = 0.1
            index += 1
            let start = index
            while index < b.count, b[index] >= 48, b[index] <= 57 {
                fraction += Double(b[index] - 48) * scale
                scale /= 10
                index += 1
            }
            guard index > start else { return nil }
        }
        guard index < b.count else { return nil }
        var offset: Int64 = 0
        if b[index] == 90 || b[index] == 122 {  // "Z"
            index += 1
        } else if b[index] == 43 || b[index] == 45, index + 6 == b.count,
                  let offsetHours = number(index + 1..<index + 3), b[index + 3] == 58,
                  let offsetMinutes = number(index + 4..<index + 6), offsetHours < 24, offsetMinutes < 60 {
            offset = (offsetHours * 60 + offsetMinutes) * 60 * (b[index] == 45 ? -1 : 1)
            index += 6
        } else {
            return nil
        }
        guard index == b.count else { return nil }
        let seconds = days(fromCivil: year, month, day) * 86_400 + hour * 3600 + minute * 60 + second - offset
        return Double(seconds) + fraction
    }

    private static func pad(_ value: Int64, _ width: Int) -> String {
        let digits = String(value)
        return String(repeating: "0", count: max(0, width - digits.count)) + digits
    }

    private static func floorDiv(_ a: Int64, _ b: Int64) -> Int64 {
        a >= 0 ? a / b : -((-a + b - 1) / b)
    }

    private static func isLeap(_ year: Int64) -> Bool {
        year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
    }

    private static func daysIn(month: Int64, year: Int64) -> Int64 {
        switch month {
        case 2: return isLeap(year) ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }

    // Howard Hinnant's days-from-civil and civil-from-days, for the proleptic Gregorian calendar.
    private static func days(fromCivil year: Int64, _ month: Int64, _ day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = floorDiv(y, 400)
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    private static func civil(fromDays days: Int64) -> (Int64, Int64, Int64) {
        let z = days + 719_468
        let era = floorDiv(z, 146_097)
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let mp = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }
}
