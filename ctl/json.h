/* A small JSON writer for sluice-ctl's --json output: objects, arrays,
 * strings (escaped, always valid UTF-8), numbers, booleans and null, with
 * the commas in one place. It writes compact JSON (no white space) as it
 * goes, to one FILE. Inside an object every value has a key; inside an
 * array or at the top the key is NULL. */
#ifndef SLUICE_CTL_JSON_H
#define SLUICE_CTL_JSON_H

#include <stdio.h>

/* Deepest nesting of objects and arrays (ctl's output uses 5). */
#define JSON_MAX_DEPTH 31

typedef struct json_writer {
    FILE *out;
    int depth;
    unsigned char first[JSON_MAX_DEPTH + 1];   /* per level: nothing written yet */
} json_writer;

/* Starts a writer on out (a top-level value comes next). */
void json_init(json_writer *w, FILE *out);

void json_object_begin(json_writer *w, const char *key);
void json_object_end(json_writer *w);
void json_array_begin(json_writer *w, const char *key);
void json_array_end(json_writer *w);

void json_int(json_writer *w, const char *key, long long v);
/* A string; NULL writes null. */
void json_str(json_writer *w, const char *key, const char *s);
void json_null(json_writer *w, const char *key);
void json_bool(json_writer *w, const char *key, int v);
/* A number written with decimals digits after the point (no exponent). */
void json_fixed(json_writer *w, const char *key, double v, int decimals);
/* A value from Redis: a JSON number when it is a plain integer (at most 18
 * digits, no leading zero), else a string. */
void json_value(json_writer *w, const char *key, const char *s);

#endif
