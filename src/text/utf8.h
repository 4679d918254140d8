/* utf8.h - UTF-8 decoding, lossy repair, Unicode White_Space, and GPT-2's byte <-> character
 * table: the small character-level facts the tokenizer relies on.
 *
 * Repair follows the "maximal subpart" rule of Unicode 3.9 (Table 3-7): each invalid sequence
 * becomes one U+FFFD, a sequence being a lead byte with as many valid continuation bytes as
 * follow it, or one stray byte. Python's bytes.decode("utf-8", "replace") and Rust's
 * String::from_utf8_lossy both do exactly this, so repaired text is what `tokenizers` saw.
 * Everything here is pure and thread-safe.
 */
#ifndef NT_UTF8_H
#define NT_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* What one step of decoding found at s[0..n), n >= 1. */
enum nt_u8 {
    NT_U8_OK,   /* a valid character of *len bytes */
    NT_U8_BAD,  /* an invalid sequence (maximal subpart) of *len bytes: one U+FFFD */
    NT_U8_SHORT /* the n bytes are a valid but incomplete start of a character */
};
enum nt_u8 nt_utf8_step(const unsigned char *s, size_t n, size_t *len, uint32_t *cp);

/* The length of the longest valid prefix of s[0..n). */
size_t nt_utf8_valid_prefix(const unsigned char *s, size_t n);

/* Writes s[0..n) with every invalid sequence replaced by U+FFFD (EF BF BD) to out, which must
 * hold 3 * n bytes; returns the bytes written. */
size_t nt_utf8_repair(const unsigned char *s, size_t n, char *out);

/* Encodes a code point (<= 0x10FFFF) into out[0..4); returns its length. */
int nt_utf8_put(uint32_t cp, char *out);

/* Rust's char::is_whitespace, regex's \s: the Unicode White_Space property. */
int nt_is_white_space(uint32_t cp);

/* The four hex digits of a JSON \uXXXX escape at s (s[0..4) must be readable): 1 and *v set,
 * or 0 when one is not a hex digit. */
int nt_hex4(const unsigned char *s, uint32_t *v);

/* GPT-2's byte-level alphabet: byte b is shown as code point nt_byte_to_cp[b] (printable bytes
 * as themselves, the 68 others as U+0100 + their rank); nt_cp_to_byte inverts it (-1 when cp is
 * not in the alphabet). */
extern const uint16_t nt_byte_to_cp[256];
int nt_cp_to_byte(uint32_t cp);

#endif /* NT_UTF8_H */
