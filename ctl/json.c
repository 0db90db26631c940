/* The JSON writer of sluice-ctl (json.h). */
#include "json.h"

#include <string.h>

void json_init(json_writer *w, FILE *out)
{
    memset(w, 0, sizeof *w);
    w->out = out;
}

/* Writes s[0..n) as a JSON string: escapes quotes, backslashes and
 * control characters, and replaces bytes that are not valid UTF-8 with
 * U+FFFD, so that the output always parses. */
static void quote(FILE *f, const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    fputc('"', f);
    for (size_t i = 0; i < n;) {
        unsigned char ch = u[i];
        if (ch == '"' || ch == '\\') {
            fprintf(f, "\\%c", ch);
            i++;
        } else if (ch == '\n') {
            fputs("\\n", f);
            i++;
        } else if (ch == '\t') {
            fputs("\\t", f);
            i++;
        } else if (ch < 0x20 || ch == 0x7f) {
            fprintf(f, "\\u%04x", ch);
            i++;
        } else if (ch < 0x80) {
            fputc(ch, f);
            i++;
        } else {
            /* Length of the sequence from its lead byte; then check the
             * continuation bytes, overlongs, surrogates, > U+10FFFF. */
            size_t len = ch >= 0xf0 && ch <= 0xf4 ? 4 : ch >= 0xe0 ? 3 : ch >= 0xc2 && ch < 0xe0 ? 2 : 0;
            int ok = len > 0 && i + len <= n;
            for (size_t k = 1; ok && k < len; k++)
                ok = (u[i + k] & 0xc0) == 0x80;
            if (ok && len == 3)
                ok = !(ch == 0xe0 && u[i + 1] < 0xa0) && !(ch == 0xed && u[i + 1] >= 0xa0);
            if (ok && len == 4)
                ok = !(ch == 0xf0 && u[i + 1] < 0x90) && !(ch == 0xf4 && u[i + 1] >= 0x90);
            if (ok) {
                fwrite(u + i, 1, len, f);
                i += len;
            } else {
                fputs("\\ufffd", f);
                i++;
            }
        }
    }
    fputc('"', f);
}

/* Before a value: the comma, and the key inside an object. */
static void pre(json_writer *w, const char *key)
{
    if (w->depth > 0) {
        if (!w->first[w->depth])
            fputc(',', w->out);
        w->first[w->depth] = 0;
    }
    if (key) {
        quote(w->out, key, strlen(key));
        fputc(':', w->out);
    }
}

static void open_level(json_writer *w, const char *key, char ch)
{
    pre(w, key);
    fputc(ch, w->out);
    /* Deeper levels share the last one's comma state (never reached). */
    if (w->depth < JSON_MAX_DEPTH)
        w->depth++;
    w->first[w->depth] = 1;
}

static void close_level(json_writer *w, char ch)
{
    if (w->depth > 0)
        w->depth--;
    fputc(ch, w->out);
}

void json_object_begin(json_writer *w, const char *key)
{
    open_level(w, key, '{');
}

void json_object_end(json_writer *w)
{
    close_level(w, '}');
}

void json_array_begin(json_writer *w, const char *key)
{
    open_level(w, key, '[');
}

void json_array_end(json_writer *w)
{
    close_level(w, ']');
}

void json_int(json_writer *w, const char *key, long long v)
{
    pre(w, key);
    fprintf(w->out, "%lld", v);
}

void json_str(json_writer *w, const char *key, const char *s)
{
    pre(w, key);
    if (s)
        quote(w->out, s, strlen(s));
    else
        fputs("null", w->out);
}

void json_null(json_writer *w, const char *key)
{
    pre(w, key);
    fputs("null", w->out);
}

void json_bool(json_writer *w, const char *key, int v)
{
    pre(w, key);
    fputs(v ? "true" : "false", w->out);
}

void json_fixed(json_writer *w, const char *key, double v, int decimals)
{
    pre(w, key);
    fprintf(w->out, "%.*f", decimals, v);
}

void json_value(json_writer *w, const char *key, const char *s)
{
    size_t i = s[0] == '-', n = strlen(s);
    int number = n > i && n - i <= 18 && !(s[i] == '0' && n - i > 1);
    for (size_t k = i; number && k < n; k++)
        number = s[k] >= '0' && s[k] <= '9';
    pre(w, key);
    if (number)
        fputs(s, w->out);
    else
        quote(w->out, s, n);
}
