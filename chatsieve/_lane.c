/* chatsieve._lane: the server's text lane for one engine read, compiled (an optional extra).

   `Lane(...)` is the engine connection's push callback (`Response.push_to`) for a vLLM stream
   whose encoder writes text chunks as frames (`StreamEncoder.text_frames`). Called with one
   read, it does what the pure-Python callback does where the read is one whole one-line event of
   one token id and nothing else, the parser's hot lane takes the id (its text ready here, else
   by `take_id`), no limit stops on it, the tool-call filter passes the text and the client takes
   the chunk now:

       _EventReader.pusher's `pushed`  (whole_event, loads_strict, VllmReader.one_id, count: the id
                                       read from the event's bytes where it can, `event_id`)
       Generation._id_pusher's `push_id`  (the limits, StreamParser.take_id's hot branch and the
                                          whitespace it holds back (`_spaced`), the metrics, the
                                          counts, ToolCallFilter.passes_text; an id whose text the
                                          C does not have, take_id itself, called from here)
       _produce's `deliver_text`       (the pending checks, encode_text, the ping time, body.write)

   Everything is checked before anything is changed; any read it does not take goes to that
   callback (`fallback`) as it came, so the pure-Python path decides every other case (an error
   before anything changed too: the callback meets it again, and records it as it records any).
   An error after is the reader's failure, as the callback records it. The same tests run both
   (tests/test_server_text_lane.py, tests/test_server_chunked_body.py). Attribute names are the
   Python objects' own: a rename there must be made here too (the tests then fail, not pass). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <string.h>

/* The Python names the lane reads and writes, interned at import: X(variable, name) */
#define NAMES(X)                                                                                        \
    X(s_partial, "partial") X(s_count, "count") X(s_completion_tokens, "completion_tokens")             \
    X(s_max_tokens, "max_tokens") X(s_vocab_size, "vocab_size") X(s_reasoning_budget, "reasoning_budget") \
    X(s_past_reasoning, "_past_reasoning") X(s_budget_hit, "_budget_hit")                              \
    X(s_reasoning_tokens, "reasoning_tokens") X(s_hot, "_hot") X(s_hot_ids, "_hot_ids")                \
    X(s_hot_stops, "_hot_stops") X(s_hot_texts, "_hot_texts") X(s_hot_k, "_hot_k") X(s_lane, "lane")   \
    X(s_held, "_held") X(s_busy, "busy") X(s_events, "events") X(s_ready, "ready") X(s_write, "write") \
    X(s_metrics, "metrics") X(s_inter_token, "inter_token") X(s_ttft, "ttft") X(s_observe, "observe")  \
    X(s_last, "_last") X(s_started, "_started") X(s_choices, "choices") X(s_token_ids, "token_ids")    \
    X(s_logprobs, "logprobs") X(s_finish_reason, "finish_reason") X(s_error, "error")                  \
    X(s_object, "object") X(s_content, "content") X(s_failure, "failure") X(s_pending_last, "last")    \
    X(s_write_paused, "write_paused") X(s_disconnected, "disconnected") X(s_is_closing, "is_closing")  \
    X(s_sum, "sum") X(s_notes, "notes") X(s_strict, "strict") X(s_wrote_text, "wrote_text")            \
    X(s_bounds, "bounds") X(s_counts, "counts") X(s_read, "_read") X(s_wake, "_wake") X(s_time, "time") \
    X(s_warm, "_warm") X(s_parked, "_parked") X(s_hot_held, "_hot_held") X(s_hot_bare, "_hot_bare")          \
    X(s_spaced_texts, "_spaced_texts")

#define DECLARE(variable, name) static PyObject *variable;
NAMES(DECLARE)
static PyObject *one;

/* The offset in `obj` of its slot `name` (a writable object member of its type: what `__slots__`
   makes), or -1 (none, or no `obj`): the lane then reads and writes the attribute by name. */
static Py_ssize_t
slot_offset(PyObject *obj, PyObject *name)
{
    if (obj == NULL)
        return -1;
    PyObject *found = _PyType_Lookup(Py_TYPE(obj), name); /* borrowed */
    if (found == NULL || !Py_IS_TYPE(found, &PyMemberDescr_Type))
        return -1;
    PyMemberDef *member = ((PyMemberDescrObject *)found)->d_member;
    return member->type == T_OBJECT_EX && !(member->flags & READONLY) ? member->offset : -1;
}

/* obj.name, a new reference, read from its slot at offset `at` (-1: by name); NULL (with an error
   set) where it has none */
static PyObject *
slot_get(PyObject *obj, Py_ssize_t at, PyObject *name)
{
    if (at >= 0) {
        PyObject *value = *(PyObject **)((char *)obj + at);
        if (value != NULL)
            return Py_NewRef(value);
    }
    return PyObject_GetAttr(obj, name); /* (an empty slot: its AttributeError) */
}

/* obj.name = value, in its slot at offset `at` (-1: by name); 0, -1 on error */
static int
slot_set(PyObject *obj, Py_ssize_t at, PyObject *name, PyObject *value)
{
    if (at < 0)
        return PyObject_SetAttr(obj, name, value);
    Py_XSETREF(*(PyObject **)((char *)obj + at), Py_NewRef(value));
    return 0;
}

/* 1: obj.name truthy, 0: falsy, -1: error */
static int
slot_true(PyObject *obj, Py_ssize_t at, PyObject *name)
{
    PyObject *v = slot_get(obj, at, name);
    if (v == NULL)
        return -1;
    int t = PyObject_IsTrue(v);
    Py_DECREF(v);
    return t;
}

/* obj.name as a C long (an int attribute); -1 with an error set where it is not one */
static long
slot_long(PyObject *obj, Py_ssize_t at, PyObject *name, int *is_none)
{
    *is_none = 0;
    PyObject *v = slot_get(obj, at, name);
    if (v == NULL)
        return -1;
    *is_none = v == Py_None;
    long n = *is_none ? 0 : PyLong_AsLong(v);
    Py_DECREF(v);
    return n;
}

/* an attribute of an object the lane has no slots for (uvicorn's), by name */
#define attr_true(obj, name) slot_true((obj), -1, (name))

/* The str of `key` in the dict obj.name (a parser's table of texts by id): 1 with `*text` set (a new
   reference), 0 where the table is no dict or holds no str for it, -1 on error */
static int
table_text(PyObject *obj, Py_ssize_t at, PyObject *name, PyObject *key, PyObject **text)
{
    PyObject *table = slot_get(obj, at, name);
    if (table == NULL)
        return -1;
    int found = 0;
    if (PyDict_CheckExact(table)) {
        PyObject *value = PyDict_GetItemWithError(table, key); /* borrowed */
        if (value == NULL)
            found = PyErr_Occurred() ? -1 : 0;
        else if (PyUnicode_CheckExact(value)) {
            *text = Py_NewRef(value);
            found = 1;
        }
    }
    Py_DECREF(table);
    return found;
}

/* the lane's object `object`'s attribute `variable` (the interned name): where its slot is */
#define AT(object, variable) self->object, self->at_##object##_##variable, variable

/* The references a Lane holds, one list for its fields, init, traverse and clear. ARGS: Lane's
   positional arguments, in order; MORE: the others (NULL where not given). */
#define ARGS(X)                                                                             \
    X(fallback)  /* the pure-Python callback: pushed(raw) -> bool */                       \
    X(reader)    /* _EventReader: count, failure */                                         \
    X(sse)       /* its SseParser: partial */                                               \
    X(loads)     /* loads_strict */                                                         \
    X(gen)       /* Generation: the counts and limits */                                    \
    X(parser)    /* StreamParser: the hot lane */                                           \
    X(calls)     /* ToolCallFilter: _held */                                                \
    X(produced)  /* list of the ids produced */                                             \
    X(pending)   /* _Pending: busy, events, last */                                         \
    X(body)      /* the client's body: ready, write */                                      \
    X(string)    /* the JSON of a str, as bytes */                                          \
    X(frames)    /* dict: kind -> tuple of bytes, the chunk's parts around the text's JSON */ \
    X(clock)     /* time.monotonic */                                                       \
    X(loop_time) /* the loop's time() where pings are sent, else None */
#define MORE(X)                                                                                 \
    X(passes)    /* calls.passes_text */                                                        \
    X(take_id)   /* parser.take_id: the ids the C does not take itself, in Python */            \
    X(flow)      /* where the body is a ChunkedBody: its flow, cycle and transport (`ready` and */ \
    X(cycle)     /* `write` here) */                                                            \
    X(transport)                                                                                \
    X(histogram) /* metrics.inter_token where it is a CheapHistogram (`observe` here) */

/* The attributes the lane reads and writes per token, X(object, name): by their slots' offsets where
   the objects' classes have slots for them (`__slots__`: Generation, StreamParser, ToolCallFilter,
   _Pending, _EventReader, SseParser, CheapHistogram), found when the lane is made; else by name. */
#define SLOTS(X)                                                                                       \
    X(gen, s_completion_tokens) X(gen, s_max_tokens) X(gen, s_vocab_size) X(gen, s_reasoning_budget)   \
    X(gen, s_past_reasoning) X(gen, s_budget_hit) X(gen, s_reasoning_tokens) X(gen, s_metrics)         \
    X(gen, s_last) X(gen, s_started) X(parser, s_hot) X(parser, s_hot_ids) X(parser, s_hot_stops)      \
    X(parser, s_hot_texts) X(parser, s_lane) X(parser, s_hot_k) X(calls, s_held) X(calls, s_notes)     \
    X(calls, s_strict) X(calls, s_wrote_text) X(pending, s_busy) X(pending, s_events)                  \
    X(pending, s_pending_last) X(reader, s_count) X(sse, s_partial) X(histogram, s_bounds)             \
    X(histogram, s_counts) X(histogram, s_sum) X(parser, s_warm) X(parser, s_parked) X(parser, s_hot_held) \
    X(parser, s_hot_bare) X(parser, s_spaced_texts)

#define FIELD(name) PyObject *name;
typedef struct {
    PyObject_HEAD
    ARGS(FIELD)
    MORE(FIELD)
    int filter_here; /* ToolCallFilter.passes_text is done here (calls is a ToolCallFilter) */
#define AT_FIELD(object, variable) Py_ssize_t at_##object##_##variable;
    SLOTS(AT_FIELD)
} Lane;

#define VISIT(name) Py_VISIT(self->name);
static int
lane_traverse(Lane *self, visitproc visit, void *arg)
{
    ARGS(VISIT)
    MORE(VISIT)
    return 0;
}

#define CLEAR(name) Py_CLEAR(self->name);
static int
lane_clear(Lane *self)
{
    ARGS(CLEAR)
    MORE(CLEAR)
    return 0;
}

static void
lane_dealloc(Lane *self)
{
    PyObject_GC_UnTrack(self);
    lane_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

#define NAME(name) #name,
#define LOCAL(name) PyObject *name;
#define ADDRESS(name) &name,
#define TAKE(name) self->name = Py_NewRef(name);
static int
lane_init(Lane *self, PyObject *args, PyObject *kwds)
{
    static char *names[] = {ARGS(NAME) "chunked", "histogram", "filter_here", NULL};
    ARGS(LOCAL)
    PyObject *chunked = Py_None, *histogram = Py_None;
    int filter_here = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOOOOOOOOOO|$OOp:Lane", names, ARGS(ADDRESS) &chunked,
                                     &histogram, &filter_here))
        return -1;
    if (chunked != Py_None && (!PyTuple_CheckExact(chunked) || PyTuple_GET_SIZE(chunked) != 3)) {
        PyErr_SetString(PyExc_TypeError, "Lane: chunked must be (flow, cycle, transport) or None");
        return -1;
    }
    if (!PyList_CheckExact(produced) || !PyDict_Check(frames)) {
        PyErr_SetString(PyExc_TypeError, "Lane: produced must be a list, frames a dict");
        return -1;
    }
    PyObject *passes = PyObject_GetAttrString(calls, "passes_text");
    if (passes == NULL)
        return -1;
    PyObject *take_id = PyObject_GetAttrString(parser, "take_id");
    if (take_id == NULL) {
        Py_DECREF(passes);
        return -1;
    }
    lane_clear(self);
    ARGS(TAKE)
    self->passes = passes;
    self->take_id = take_id;
    if (chunked != Py_None) {
        self->flow = Py_NewRef(PyTuple_GET_ITEM(chunked, 0));
        self->cycle = Py_NewRef(PyTuple_GET_ITEM(chunked, 1));
        self->transport = Py_NewRef(PyTuple_GET_ITEM(chunked, 2));
    }
    self->histogram = histogram != Py_None ? Py_NewRef(histogram) : NULL;
    self->filter_here = filter_here;
#define RESOLVE(object, variable) self->at_##object##_##variable = slot_offset(self->object, variable);
    SLOTS(RESOLVE)
    return 0;
}

/* dict.get(key) is None (missing or None): 1, 0, -1 on error */
static int
get_is_none(PyObject *dict, PyObject *key)
{
    PyObject *v = PyDict_GetItemWithError(dict, key); /* borrowed */
    if (v == NULL)
        return PyErr_Occurred() ? -1 : 1;
    return v == Py_None;
}

/* VllmReader.one_id: the id of an event of one token id and nothing else, else -1 (-2: error) */
static long
one_id(PyObject *event)
{
    PyObject *choices = PyDict_GetItemWithError(event, s_choices);
    if (choices == NULL)
        return PyErr_Occurred() ? -2 : -1;
    if (!PyList_CheckExact(choices) || PyList_GET_SIZE(choices) != 1)
        return -1;
    PyObject *choice = PyList_GET_ITEM(choices, 0);
    if (!PyDict_CheckExact(choice))
        return -1;
    PyObject *ids = PyDict_GetItemWithError(choice, s_token_ids);
    if (ids == NULL)
        return PyErr_Occurred() ? -2 : -1;
    if (!PyList_CheckExact(ids) || PyList_GET_SIZE(ids) != 1 || !PyLong_CheckExact(PyList_GET_ITEM(ids, 0)))
        return -1;
    int overflow;
    long tid = PyLong_AsLongAndOverflow(PyList_GET_ITEM(ids, 0), &overflow);
    if (overflow || tid < 0)
        return -1; /* (out of any vocabulary: push_id declines it) */
    int r = get_is_none(choice, s_logprobs);
    if (r != 1)
        return r < 0 ? -2 : -1;
    r = get_is_none(choice, s_finish_reason);
    if (r != 1)
        return r < 0 ? -2 : -1;
    PyObject *error = PyDict_GetItemWithError(event, s_error);
    if (error == NULL && PyErr_Occurred())
        return -2;
    if (error != NULL) {
        r = PyObject_IsTrue(error);
        if (r != 0)
            return r < 0 ? -2 : -1;
    }
    PyObject *object = PyDict_GetItemWithError(event, s_object);
    if (object == NULL && PyErr_Occurred())
        return -2;
    if (object != NULL) {
        r = PyObject_RichCompareBool(object, s_error, Py_EQ);
        if (r != 0)
            return r < 0 ? -2 : -1;
    }
    return tid;
}

/* ---- The event's token id read from its bytes, without objects (`event_id`).

   A paced vLLM stream's usual event is one token id and nothing else; `loads_strict` building it
   as dicts, lists and strings, and freeing them, was a tenth of the lane's read. The scanner below
   reads a subset of JSON: the numbers are integers of at most 18 digits (no fraction, no exponent,
   so none overflows), strings have no \u escape (so a key or a value it compares is compared as
   written: the other escapes spell no letter), and nesting is at most 32 deep. Within it, the text is checked as orjson checks it (control characters, UTF-8,
   surrogates, leading zeros, trailing commas, anything after the document), so what it reads,
   orjson reads the same. Anything outside it, it declines, and the lane reads the event with
   `loads_strict` as before: declining is always safe. tests/test_server_text_lane.py checks both
   ways on generated events that what it accepts orjson parses to the same id. */

#define JSON_DEPTH 32

static const char *
json_space(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* Past the string at `p` (its opening quote), or NULL */
static const char *
json_string(const char *p, const char *end)
{
    p++;
    while (p < end) {
        unsigned char c = (unsigned char)*p;
        if (c == '"')
            return p + 1;
        if (c < 0x20)
            return NULL;
        if (c == '\\') {
            if (p + 1 >= end || strchr("\"\\/bfnrt", p[1]) == NULL || p[1] == '\0')
                return NULL; /* (and \u: its surrogates are orjson's to judge) */
            p += 2;
            continue;
        }
        if (c < 0x80) {
            p++;
            continue;
        }
        /* UTF-8, strictly: no overlong form, no surrogate, nothing past U+10FFFF */
        Py_ssize_t n;
        unsigned char lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF)
            n = 1;
        else if (c >= 0xE0 && c <= 0xEF) {
            n = 2;
            if (c == 0xE0)
                lo = 0xA0;
            else if (c == 0xED)
                hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            n = 3;
            if (c == 0xF0)
                lo = 0x90;
            else if (c == 0xF4)
                hi = 0x8F;
        } else
            return NULL;
        if (end - p <= n)
            return NULL;
        unsigned char c1 = (unsigned char)p[1];
        if (c1 < lo || c1 > hi)
            return NULL;
        for (Py_ssize_t i = 2; i <= n; i++)
            if (((unsigned char)p[i] & 0xC0) != 0x80)
                return NULL;
        p += n + 1;
    }
    return NULL;
}

/* Past the integer at `p` (-?(0|[1-9][0-9]*), at most 18 digits), or NULL; its value in `*value`
   when it is not negative, else -1 */
static const char *
json_integer(const char *p, const char *end, long long *value)
{
    int negative = p < end && *p == '-';
    if (negative)
        p++;
    const char *digits = p;
    long long v = 0;
    while (p < end && *p >= '0' && *p <= '9') {
        v = v * 10 + (*p - '0');
        p++;
        if (p - digits > 18)
            return NULL;
    }
    if (p == digits || (*digits == '0' && p - digits > 1))
        return NULL;
    if (p < end && (*p == '.' || *p == 'e' || *p == 'E'))
        return NULL;
    *value = negative ? -1 : v;
    return p;
}

static const char *json_value(const char *p, const char *end, int depth);

/* Past the array at `p` (its '['), or NULL; `*count` its items, `*first` where the first begins */
static const char *
json_array(const char *p, const char *end, int depth, Py_ssize_t *count, const char **first)
{
    *count = 0;
    p = json_space(p + 1, end);
    if (p < end && *p == ']')
        return p + 1;
    for (;;) {
        if (*count == 0)
            *first = p;
        if ((p = json_value(p, end, depth + 1)) == NULL)
            return NULL;
        (*count)++;
        p = json_space(p, end);
        if (p >= end)
            return NULL;
        if (*p == ']')
            return p + 1;
        if (*p != ',')
            return NULL;
        p = json_space(p + 1, end);
    }
}

/* The members of an object a caller looks for: its keys, and where the last of each begins (NULL:
   none), as orjson keeps the last of a repeated key */
typedef struct {
    const char *const *keys;
    const char **found;
    int n;
} Wanted;

/* Past the object at `p` (its '{'), or NULL */
static const char *
json_object(const char *p, const char *end, int depth, Wanted *wanted)
{
    p = json_space(p + 1, end);
    if (p < end && *p == '}')
        return p + 1;
    for (;;) {
        if (p >= end || *p != '"')
            return NULL;
        const char *key = p + 1, *after = json_string(p, end);
        if (after == NULL)
            return NULL;
        p = json_space(after, end);
        if (p >= end || *p != ':')
            return NULL;
        p = json_space(p + 1, end);
        for (int i = 0; wanted != NULL && i < wanted->n; i++) {
            size_t length = strlen(wanted->keys[i]);
            if ((size_t)(after - 1 - key) == length && memcmp(key, wanted->keys[i], length) == 0)
                wanted->found[i] = p;
        }
        if ((p = json_value(p, end, depth + 1)) == NULL)
            return NULL;
        p = json_space(p, end);
        if (p >= end)
            return NULL;
        if (*p == '}')
            return p + 1;
        if (*p != ',')
            return NULL;
        p = json_space(p + 1, end);
    }
}

/* Past the value at `p`, or NULL */
static const char *
json_value(const char *p, const char *end, int depth)
{
    if (p >= end || depth > JSON_DEPTH)
        return NULL;
    long long v;
    Py_ssize_t count;
    const char *first;
    switch (*p) {
    case '{':
        return json_object(p, end, depth, NULL);
    case '[':
        return json_array(p, end, depth, &count, &first);
    case '"':
        return json_string(p, end);
    case 't':
        return end - p >= 4 && memcmp(p, "true", 4) == 0 ? p + 4 : NULL;
    case 'f':
        return end - p >= 5 && memcmp(p, "false", 5) == 0 ? p + 5 : NULL;
    case 'n':
        return end - p >= 4 && memcmp(p, "null", 4) == 0 ? p + 4 : NULL;
    default:
        return json_integer(p, end, &v);
    }
}

/* Whether the member at `p` (NULL: none) is `word` (NULL: is absent or null) */
static int
json_is(const char *p, const char *end, const char *word)
{
    if (p == NULL)
        return word == NULL;
    if (word == NULL)
        word = "null";
    size_t length = strlen(word);
    return (size_t)(end - p) >= length && memcmp(p, word, length) == 0;
}

/* Whether the value at `p` (read whole) is false in Python: null, false, 0, "", [] or {} */
static int
json_falsy(const char *p, const char *end)
{
    if (json_is(p, end, "null") || json_is(p, end, "false") || json_is(p, end, "\"\"") || json_is(p, end, "0")
        || json_is(p, end, "-0"))
        return 1; /* (a value that begins so is that value: no leading zeros, no fractions) */
    if (*p == '[' || *p == '{') {
        const char *q = json_space(p + 1, end);
        return *q == (*p == '[' ? ']' : '}');
    }
    return 0;
}

/* The token id of the event whose data is [p, end): what `one_id(loads_strict(data))` gives where
   that is one token id and nothing else, else -1 (not such an event, or not in the scanner's
   subset: the lane then reads it with `loads_strict`) */
static long
event_id(const char *p, const char *end)
{
    static const char *const top_keys[] = {"choices", "error", "object"};
    static const char *const choice_keys[] = {"token_ids", "logprobs", "finish_reason"};
    const char *top[3] = {NULL, NULL, NULL}, *choice[3] = {NULL, NULL, NULL};
    Wanted wanted = {top_keys, top, 3};
    p = json_space(p, end);
    if (p >= end || *p != '{' || (p = json_object(p, end, 0, &wanted)) == NULL || json_space(p, end) != end)
        return -1;
    const char *choices = top[0], *error = top[1], *object = top[2];
    /* `error` absent or falsy; `object` not "error" */
    if (error != NULL && !json_falsy(error, end))
        return -1;
    if (json_is(object, end, "\"error\""))
        return -1;
    /* choices: a list of one object, whose token_ids is a list of one integer */
    Py_ssize_t count;
    const char *first = NULL;
    if (choices == NULL || *choices != '[' || json_array(choices, end, 0, &count, &first) == NULL || count != 1
        || *first != '{')
        return -1;
    Wanted in_choice = {choice_keys, choice, 3};
    if (json_object(first, end, 1, &in_choice) == NULL || !json_is(choice[1], end, NULL)
        || !json_is(choice[2], end, NULL))
        return -1;
    const char *ids = choice[0];
    if (ids == NULL || *ids != '[' || json_array(ids, end, 1, &count, &first) == NULL || count != 1)
        return -1;
    long long tid;
    if (json_integer(first, end, &tid) == NULL || tid < 0 || tid > LONG_MAX)
        return -1;
    return (long)tid;
}

/* CheapHistogram.observe(value) on the lane's histogram: the count of value's bucket (bisect_left on
   its bounds) and the sum */
static PyObject *
observe(Lane *self, PyObject *value)
{
    PyObject *bounds = slot_get(AT(histogram, s_bounds)), *counts = NULL, *sum = NULL, *result = NULL;
    if (bounds == NULL)
        return NULL;
    counts = slot_get(AT(histogram, s_counts));
    if (counts == NULL)
        goto out;
    if (!PyTuple_CheckExact(bounds) || !PyList_CheckExact(counts)
        || PyList_GET_SIZE(counts) != PyTuple_GET_SIZE(bounds) + 1) {
        PyErr_SetString(PyExc_TypeError, "Lane: not a CheapHistogram's bounds and counts");
        goto out;
    }
    Py_ssize_t lo = 0, hi = PyTuple_GET_SIZE(bounds);
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        int below = PyObject_RichCompareBool(PyTuple_GET_ITEM(bounds, mid), value, Py_LT);
        if (below < 0)
            goto out;
        if (below)
            lo = mid + 1;
        else
            hi = mid;
    }
    PyObject *count = PyNumber_Add(PyList_GET_ITEM(counts, lo), one);
    if (count == NULL)
        goto out;
    PyList_SetItem(counts, lo, count); /* (steals count) */
    PyObject *old = slot_get(AT(histogram, s_sum));
    if (old == NULL)
        goto out;
    sum = PyNumber_Add(old, value);
    Py_DECREF(old);
    if (sum == NULL || slot_set(AT(histogram, s_sum), sum) < 0)
        goto out;
    result = Py_NewRef(Py_None);
out:
    Py_XDECREF(sum);
    Py_XDECREF(counts);
    Py_DECREF(bounds);
    return result;
}

/* ChunkedBody.write(chunk): the chunk framed, unless the client is gone; 0, -1 on error */
static int
body_write(Lane *self, PyObject *chunk)
{
    int gone = attr_true(self->cycle, s_disconnected);
    if (gone != 0)
        return gone < 0 ? -1 : 0;
    PyObject *closing = PyObject_CallMethodNoArgs(self->transport, s_is_closing);
    if (closing == NULL)
        return -1;
    gone = PyObject_IsTrue(closing);
    Py_DECREF(closing);
    if (gone != 0)
        return gone < 0 ? -1 : 0;
    Py_ssize_t size = PyBytes_GET_SIZE(chunk);
    char head[24];
    int head_len = snprintf(head, sizeof head, "%zx\r\n", size);
    PyObject *framed = PyBytes_FromStringAndSize(NULL, head_len + size + 2);
    if (framed == NULL)
        return -1;
    char *p = PyBytes_AS_STRING(framed);
    memcpy(p, head, head_len);
    memcpy(p + head_len, PyBytes_AS_STRING(chunk), size);
    memcpy(p + head_len + size, "\r\n", 2);
    PyObject *written = PyObject_CallMethodOneArg(self->transport, s_write, framed);
    Py_DECREF(framed);
    if (written == NULL)
        return -1;
    Py_DECREF(written);
    return 0;
}

/* Whether a text of the parser's lane can be written now (1, 0, -1 on error), and `*kind`, `*frame`
   (new references) and `*is_content` for it: the kind has a frame, the filter passes the text as it
   is (no strict call held), and the client takes it now */
static int
writable(Lane *self, PyObject **kind, PyObject **frame, int *is_content)
{
    int r;
    *kind = slot_get(AT(parser, s_lane));
    if (*kind == NULL)
        return -1;
    *frame = Py_XNewRef(PyDict_GetItemWithError(self->frames, *kind));
    if (*frame == NULL)
        return PyErr_Occurred() ? -1 : 0;
    if (!PyTuple_CheckExact(*frame) || PyTuple_GET_SIZE(*frame) < 2)
        return 0;
    PyObject *held = slot_get(AT(calls, s_held));
    if (held == NULL)
        return -1;
    r = held != Py_None;
    Py_DECREF(held);
    if (r)
        return 0;
    if ((r = slot_true(AT(pending, s_busy))) != 0 || (r = slot_true(AT(pending, s_events))) != 0)
        return r < 0 ? -1 : 0;
    if (self->flow != NULL) { /* ChunkedBody.ready: the client reading, or gone */
        r = attr_true(self->flow, s_write_paused);
        if (r > 0)
            r = attr_true(self->cycle, s_disconnected);
        else if (r == 0)
            r = 1;
    } else {
        r = attr_true(self->body, s_ready);
    }
    if (r <= 0)
        return r;
    *is_content = PyUnicode_Check(*kind) && PyUnicode_Compare(*kind, s_content) == 0;
    return PyErr_Occurred() ? -1 : 1;
}

/* What the lane takes of an event of the one token id `tid`: 1 taken (all written), 0 not (nothing
   changed), -1 an error before anything changed, -2 an error after (the reader's failure, as
   `pushed` records it) */
static int
take(Lane *self, long tid)
{

    /* push_id's limits */
    int none;
    long n = slot_long(AT(gen, s_completion_tokens), &none);
    if (n < 0 && PyErr_Occurred())
        return -1;
    long max_tokens = slot_long(AT(gen, s_max_tokens), &none);
    if (max_tokens == -1 && PyErr_Occurred())
        return -1;
    if (!none && n >= max_tokens)
        return 0;
    long vocab_size = slot_long(AT(gen, s_vocab_size), &none);
    if (vocab_size == -1 && PyErr_Occurred())
        return -1;
    if (!none && tid >= vocab_size)
        return 0;
    long budget = slot_long(AT(gen, s_reasoning_budget), &none);
    if (budget == -1 && PyErr_Occurred())
        return -1;
    int past = slot_true(AT(gen, s_past_reasoning));
    if (past < 0)
        return -1;
    if (!none && !past) {
        int hit = slot_true(AT(gen, s_budget_hit));
        if (hit < 0)
            return -1;
        if (!hit) {
            long used = slot_long(AT(gen, s_reasoning_tokens), &none);
            if (used == -1 && PyErr_Occurred())
                return -1;
            if (used >= budget)
                return 0;
        }
    }

    /* take_id's hot branch, and `_spaced` where the text ends in whitespace or follows whitespace the
       lane holds back: the lane open (hot, or warm: holding whitespace back), the id's text known */
    PyObject *hot = slot_get(AT(parser, s_hot));
    if (hot == NULL)
        return -1;
    int result = -1;
    PyObject *key = NULL, *stops = NULL, *kind = NULL, *value = NULL, *chunk = NULL;
    PyObject *text = NULL, *frame = NULL; /* (held: Python code runs before they are used) */
    PyObject *parts = NULL, *held_ws = NULL, *out = NULL, *body = NULL, *tail = NULL;
    int warm = 0, spacing = 0, delegated = 0, is_content = 0, r;
    if (PyList_CheckExact(hot)) {
        parts = Py_NewRef(hot);
    } else if (hot == Py_None) {
        PyObject *parked = slot_get(AT(parser, s_parked));
        if (parked == NULL)
            goto done;
        r = parked != Py_None; /* (a character's first bytes held: `_take_bytes`) */
        Py_DECREF(parked);
        if (r)
            goto delegate;
        parts = slot_get(AT(parser, s_warm));
        if (parts == NULL)
            goto done;
        if (!PyList_CheckExact(parts)) /* (neither: a call's held arguments, `_take_held_args`) */
            goto delegate;
        warm = 1;
    } else {
        result = 0;
        goto done;
    }
    r = slot_true(AT(parser, s_hot_ids));
    if (r <= 0) {
        result = r < 0 ? -1 : 0;
        goto done;
    }
    key = PyLong_FromLong(tid);
    if (key == NULL)
        goto done;
    stops = slot_get(AT(parser, s_hot_stops));
    if (stops == NULL)
        goto done;
    r = PySequence_Contains(stops, key);
    if (r != 0) {
        result = r < 0 ? -1 : 0;
        goto done;
    }
    r = table_text(AT(parser, s_hot_texts), key, &text); /* (not yet known: `_hot_id` finds it) */
    if (r <= 0) {
        if (r == 0)
            goto delegate;
        goto done;
    }
    spacing = warm;
    if (PyUnicode_GET_LENGTH(text) == 0) { /* the text ends in whitespace: the bare lane holds it back */
        r = slot_true(AT(parser, s_hot_bare));
        if (r < 0)
            goto done;
        Py_CLEAR(text);
        if (r == 0 || (r = table_text(AT(parser, s_spaced_texts), key, &text)) == 0
            || PyUnicode_GET_LENGTH(text) == 0)
            goto delegate; /* (or a character's first bytes: `_take_bytes`) */
        if (r < 0)
            goto done;
        spacing = 1;
    }
    Py_ssize_t length = PyUnicode_GET_LENGTH(text), body_length = length;
    if (spacing) { /* `_spaced`: what it sends (the held whitespace, then the body), what it holds */
        held_ws = slot_get(AT(parser, s_hot_held));
        if (held_ws == NULL)
            goto done;
        if (!PyList_CheckExact(held_ws)) {
            result = 0;
            goto done;
        }
        int text_kind = PyUnicode_KIND(text);
        const void *data = PyUnicode_DATA(text);
        while (body_length > 0) {
            Py_UCS4 c = PyUnicode_READ(text_kind, data, body_length - 1);
            if (c != ' ' && c != '\t' && c != '\r' && c != '\n')
                break;
            body_length--;
        }
        if (body_length > 0) {
            body = PyUnicode_Substring(text, 0, body_length);
            if (body == NULL)
                goto done;
            if (PyList_GET_SIZE(held_ws) == 0) {
                out = Py_NewRef(body);
            } else {
                PyObject *empty = PyUnicode_New(0, 0), *ws = empty != NULL ? PyUnicode_Join(empty, held_ws) : NULL;
                Py_XDECREF(empty);
                out = ws != NULL ? PyUnicode_Concat(ws, body) : NULL;
                Py_XDECREF(ws);
                if (out == NULL)
                    goto done;
            }
        }
        if (body_length < length && (tail = PyUnicode_Substring(text, body_length, length)) == NULL)
            goto done;
    } else {
        out = Py_NewRef(text);
    }

    if (out != NULL && (r = writable(self, &kind, &frame, &is_content)) <= 0) { /* a text to send */
        result = r;
        goto done;
    }
    goto taken;

delegate:
    /* The ids the C does not take itself (one not seen before, a character cut over several ids, a
       call's held arguments): StreamParser.take_id takes them in Python, once every check its text
       would need has passed (a "" needs none: then a check only declines what it need not). */
    if (key == NULL && (key = PyLong_FromLong(tid)) == NULL)
        goto done;
    if ((r = writable(self, &kind, &frame, &is_content)) <= 0) {
        result = r;
        goto done;
    }
    result = -2; /* (an error in take_id is the stream's failure, as in push_id) */
    out = PyObject_CallOneArg(self->take_id, key);
    if (out == NULL)
        goto done;
    if (out == Py_None) { /* nothing taken: the Python callback reads the event */
        Py_CLEAR(out);
        result = 0;
        goto done;
    }
    if (!PyUnicode_CheckExact(out)) {
        PyErr_SetString(PyExc_TypeError, "Lane: take_id() did not return a str or None");
        goto done;
    }
    if (PyUnicode_GET_LENGTH(out) == 0) /* (held back, or added to a call's held arguments) */
        Py_CLEAR(out);
    delegated = 1;

taken:
    /* taken: from here on an error is the stream's failure */
    result = -2;
    Py_ssize_t taken = 1;
    if (delegated) {
        taken = 0; /* (take_id kept the parser's lane itself) */
    } else if (!spacing) {
        if (PyList_Append(parts, text) < 0)
            goto done;
    } else {
        taken = 0;
        if (body != NULL) {
            taken = PyList_GET_SIZE(held_ws) + 1;
            for (Py_ssize_t i = 0; i < taken - 1; i++)
                if (PyList_Append(parts, PyList_GET_ITEM(held_ws, i)) < 0)
                    goto done;
            if (PyList_Append(parts, body) < 0 || PyList_SetSlice(held_ws, 0, PyList_GET_SIZE(held_ws), NULL) < 0)
                goto done;
        }
        if (tail != NULL && PyList_Append(held_ws, tail) < 0)
            goto done;
        int holding = PyList_GET_SIZE(held_ws) > 0;
        if (slot_set(AT(parser, s_hot), holding ? Py_None : parts) < 0
            || slot_set(AT(parser, s_warm), holding ? parts : Py_None) < 0)
            goto done;
    }
    if (taken) {
        PyObject *k = slot_get(AT(parser, s_hot_k));
        if (k == NULL)
            goto done;
        PyObject *add = PyLong_FromSsize_t(taken);
        PyObject *k1 = add != NULL ? PyNumber_Add(k, add) : NULL;
        Py_XDECREF(add);
        Py_DECREF(k);
        if (k1 == NULL || slot_set(AT(parser, s_hot_k), k1) < 0) {
            Py_XDECREF(k1);
            goto done;
        }
        Py_DECREF(k1);
    }

    PyObject *metrics = slot_get(AT(gen, s_metrics));
    if (metrics == NULL)
        goto done;
    if (metrics != Py_None) {
        PyObject *now = PyObject_CallNoArgs(self->clock);
        PyObject *since = now != NULL ? (n ? slot_get(AT(gen, s_last)) : slot_get(AT(gen, s_started))) : NULL;
        PyObject *hist = since != NULL ? PyObject_GetAttr(metrics, n ? s_inter_token : s_ttft) : NULL;
        PyObject *gap = hist != NULL ? PyNumber_Subtract(now, since) : NULL;
        PyObject *ok = NULL;
        if (gap != NULL)
            ok = n && self->histogram == hist ? observe(self, gap) : PyObject_CallMethodOneArg(hist, s_observe, gap);
        int set = ok != NULL ? slot_set(AT(gen, s_last), now) : -1;
        Py_XDECREF(ok);
        Py_XDECREF(gap);
        Py_XDECREF(hist);
        Py_XDECREF(since);
        Py_XDECREF(now);
        if (set < 0) {
            Py_DECREF(metrics);
            goto done;
        }
    }
    Py_DECREF(metrics);
    PyObject *n1 = PyLong_FromLong(n + 1);
    if (n1 == NULL || slot_set(AT(gen, s_completion_tokens), n1) < 0) {
        Py_XDECREF(n1);
        goto done;
    }
    Py_DECREF(n1);
    if (PyList_Append(self->produced, key) < 0)
        goto done;
    if (!past) {
        PyObject *used = slot_get(AT(gen, s_reasoning_tokens));
        PyObject *used1 = used != NULL ? PyNumber_Add(used, one) : NULL;
        int set = used1 != NULL ? slot_set(AT(gen, s_reasoning_tokens), used1) : -1;
        Py_XDECREF(used1);
        Py_XDECREF(used);
        if (set < 0)
            goto done;
    }
    if (out == NULL) /* whitespace held back: nothing to send (push_id returns before the filter) */
        goto counted;
    if (is_content && slot_set(AT(gen, s_past_reasoning), Py_True) < 0)
        goto done;
    if (self->filter_here) { /* ToolCallFilter.passes_text, its _held checked above */
        if (is_content) {
            r = slot_true(AT(calls, s_notes));
            if (r == 0) {
                PyObject *strict = slot_get(AT(calls, s_strict));
                if (strict == NULL)
                    goto done;
                r = strict != Py_None;
                Py_DECREF(strict);
            }
            if (r < 0 || (r > 0 && slot_set(AT(calls, s_wrote_text), Py_True) < 0))
                goto done;
        }
    } else {
        PyObject *passed = PyObject_CallOneArg(self->passes, kind); /* True: checked above */
        if (passed == NULL)
            goto done;
        Py_DECREF(passed);
    }

    /* encode_text: the frame's parts with the text's JSON between each two */
    value = PyObject_CallOneArg(self->string, out);
    if (value == NULL)
        goto done;
    if (!PyBytes_CheckExact(value)) {
        PyErr_SetString(PyExc_TypeError, "Lane: string() did not return bytes");
        goto done;
    }
    Py_ssize_t pieces = PyTuple_GET_SIZE(frame), size = (pieces - 1) * PyBytes_GET_SIZE(value);
    for (Py_ssize_t i = 0; i < pieces; i++) {
        PyObject *part = PyTuple_GET_ITEM(frame, i);
        if (!PyBytes_CheckExact(part)) {
            PyErr_SetString(PyExc_TypeError, "Lane: a frame's part is not bytes");
            goto done;
        }
        size += PyBytes_GET_SIZE(part);
    }
    chunk = PyBytes_FromStringAndSize(NULL, size);
    if (chunk == NULL)
        goto done;
    char *p = PyBytes_AS_STRING(chunk);
    for (Py_ssize_t i = 0; i < pieces; i++) {
        PyObject *part = PyTuple_GET_ITEM(frame, i);
        if (i) {
            memcpy(p, PyBytes_AS_STRING(value), PyBytes_GET_SIZE(value));
            p += PyBytes_GET_SIZE(value);
        }
        memcpy(p, PyBytes_AS_STRING(part), PyBytes_GET_SIZE(part));
        p += PyBytes_GET_SIZE(part);
    }
    if (self->loop_time != Py_None) { /* deliver_text's ping time */
        PyObject *now = PyObject_CallNoArgs(self->loop_time);
        int set = now != NULL ? slot_set(AT(pending, s_pending_last), now) : -1;
        Py_XDECREF(now);
        if (set < 0)
            goto done;
    }
    if (self->flow != NULL) { /* ChunkedBody.write: one chunk, unless the client is gone */
        if (body_write(self, chunk) < 0)
            goto done;
    } else {
        PyObject *written = PyObject_CallMethodOneArg(self->body, s_write, chunk);
        if (written == NULL)
            goto done;
        Py_DECREF(written);
    }
counted:;
    PyObject *count = slot_get(AT(reader, s_count));
    PyObject *count1 = count != NULL ? PyNumber_Add(count, one) : NULL;
    int set = count1 != NULL ? slot_set(AT(reader, s_count), count1) : -1;
    Py_XDECREF(count1);
    Py_XDECREF(count);
    if (set < 0)
        goto done;
    result = 1;
done:
    Py_XDECREF(tail);
    Py_XDECREF(body);
    Py_XDECREF(out);
    Py_XDECREF(held_ws);
    Py_XDECREF(parts);
    Py_XDECREF(frame);
    Py_XDECREF(text);
    Py_XDECREF(chunk);
    Py_XDECREF(value);
    Py_XDECREF(kind);
    Py_XDECREF(stops);
    Py_XDECREF(key);
    Py_DECREF(hot);
    return result;
}

/* What the lane takes of `raw`, a read: as `take` says (1, 0, -1, -2) */
static int
take_read(Lane *self, PyObject *raw)
{
    /* _EventReader.whole_event: one whole one-line event and nothing else, no event begun before */
    if (!PyBytes_CheckExact(raw))
        return 0;
    const char *s = PyBytes_AS_STRING(raw);
    Py_ssize_t len = PyBytes_GET_SIZE(raw);
    if (len < 8 || memcmp(s, "data: ", 6) != 0 || s[len - 2] != '\n' || s[len - 1] != '\n'
        || memchr(s, '\n', len) != s + len - 2 || memchr(s, '\r', len) != NULL
        || (len == 14 && memcmp(s + 6, "[DONE]", 6) == 0))
        return 0;
    int begun = slot_true(AT(sse, s_partial));
    if (begun != 0)
        return begun < 0 ? -1 : 0;
    long tid = event_id(s + 6, s + len - 2);
    if (tid < 0) { /* (not read without objects: read as `pushed` reads it) */
        PyObject *data = PyBytes_FromStringAndSize(s + 6, len - 8);
        if (data == NULL)
            return -1;
        PyObject *event = PyObject_CallOneArg(self->loads, data); /* (invalid JSON: the fallback says so) */
        Py_DECREF(data);
        if (event == NULL)
            return -1;
        tid = PyDict_CheckExact(event) ? one_id(event) : -1;
        Py_DECREF(event);
        if (tid < 0)
            return tid == -1 ? 0 : -1;
    }
    return take(self, tid);
}

/* The lane's answer to one read `raw`: True (taken), False (a failure, recorded for the reader),
   or the Python callback's (any read not taken) */
static PyObject *
lane_push(Lane *self, PyObject *raw)
{
    int taken = take_read(self, raw);
    if (taken == 1)
        Py_RETURN_TRUE;
    if (taken == -2) { /* as `pushed` does: raised in the reader's task, not in the loop's callback */
        PyObject *type, *exc, *tb;
        PyErr_Fetch(&type, &exc, &tb);
        PyErr_NormalizeException(&type, &exc, &tb);
        if (tb != NULL)
            PyException_SetTraceback(exc, tb);
        Py_XDECREF(type);
        Py_XDECREF(tb);
        int set = PyObject_SetAttr(self->reader, s_failure, exc);
        Py_DECREF(exc);
        if (set < 0)
            return NULL;
        Py_RETURN_FALSE;
    }
    if (taken == -1) /* before anything changed: the Python callback reads it, and says what is wrong */
        PyErr_Clear();
    return PyObject_CallOneArg(self->fallback, raw);
}

static PyObject *
lane_call(Lane *self, PyObject *args, PyObject *kwds)
{
    PyObject *raw;
    if (!PyArg_UnpackTuple(args, "Lane", 1, 1, &raw))
        return NULL;
    return lane_push(self, raw);
}

static PyTypeObject LaneType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "chatsieve._lane.Lane",
    .tp_basicsize = sizeof(Lane),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The server's text lane for one engine read (see the module's source).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)lane_init,
    .tp_dealloc = (destructor)lane_dealloc,
    .tp_traverse = (traverseproc)lane_traverse,
    .tp_clear = (inquiry)lane_clear,
    .tp_call = (ternaryfunc)lane_call,
};

/* ---- ConnectionBase: the engine connection's reads (chatsieve/server/client.py's _Connection,
   whose base it is where this extension is built).

   What an engine sends per token is one chunk of a chunked body, read alone. Where a callback
   takes pushes (`Response.push_to`) and the HTTP parser stands at a chunk's start with nothing of
   the body unread, a read of whole plain chunks (`SIZE CRLF payload CRLF`, the size hex digits
   only and not 0) is taken apart here: its payload goes to the callback, past the parser (which
   would end where it stands, at the next chunk's start), its `on_body` and `take`, with no Python
   frame between the event loop and the callback (a Lane is called directly). Every other read
   goes to the Python method `_read` (the parser, and the flag `at_chunk_start`, which its
   callbacks keep). The attributes below are the Python class's own: Python reads and writes them
   as any. tests/test_server_client.py checks that any cutting of a response pushes and keeps the
   same bytes as the parser alone. */

typedef struct {
    PyObject_HEAD
    PyObject *push;  /* the callback taking pushes, or None */
    PyObject *body;  /* list of body bytes not yet taken */
    PyObject *error; /* the connection's failure, or None */
    PyObject *loop;  /* the event loop: time() */
    double deadline; /* when the reader's read times out */
    double timeout;  /* the reader's read timeout (moved on by pushed reads too) */
    Py_ssize_t step_bytes; /* the most a push hands over (client.py's STEP_BYTES) */
    char received_any, complete, at_chunk_start, pushed_back;
} Connection;

static int
connection_traverse(Connection *self, visitproc visit, void *arg)
{
    Py_VISIT(self->push);
    Py_VISIT(self->body);
    Py_VISIT(self->error);
    Py_VISIT(self->loop);
    return 0;
}

static int
connection_clear(Connection *self)
{
    Py_CLEAR(self->push);
    Py_CLEAR(self->body);
    Py_CLEAR(self->error);
    Py_CLEAR(self->loop);
    return 0;
}

static void
connection_dealloc(Connection *self)
{
    PyObject_GC_UnTrack(self);
    connection_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
hex_digit(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* The payload of `data` where it is one or more whole plain chunks and nothing else (a new
   reference); NULL without an error where it is not, NULL with one where memory ran out. */
static PyObject *
whole_chunks(PyObject *data)
{
    const char *s = PyBytes_AS_STRING(data);
    Py_ssize_t end = PyBytes_GET_SIZE(data), pos = 0, total = 0, first = 0, chunks = 0;
    while (pos < end) {
        Py_ssize_t size = 0, i = pos;
        for (int d; i < end && i - pos < 8 && (d = hex_digit(s[i])) >= 0; i++)
            size = size * 16 + d;
        if (i == pos || end - i < 2 || s[i] != '\r' || s[i + 1] != '\n' || size == 0)
            return NULL;
        Py_ssize_t start = i + 2;
        if (end - start < size + 2 || s[start + size] != '\r' || s[start + size + 1] != '\n')
            return NULL;
        if (chunks++ == 0)
            first = start;
        total += size;
        pos = start + size + 2;
    }
    if (chunks == 0)
        return NULL;
    if (chunks == 1)
        return PyBytes_FromStringAndSize(s + first, total);
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL)
        return NULL;
    char *p = PyBytes_AS_STRING(out);
    for (pos = 0; pos < end;) { /* (checked above) */
        Py_ssize_t size = 0, i = pos;
        for (int d; (d = hex_digit(s[i])) >= 0; i++)
            size = size * 16 + d;
        memcpy(p, s + i + 2, size);
        p += size;
        pos = i + 2 + size + 2;
    }
    return out;
}

/* `payload` (a reference taken over) to the callback, the read timeout moved on first */
static PyObject *
connection_push(Connection *self, PyObject *payload)
{
    self->received_any = 1;
    PyObject *now = PyObject_VectorcallMethod(s_time, &self->loop, 1, NULL);
    double t = now != NULL ? PyFloat_AsDouble(now) : -1.0;
    Py_XDECREF(now);
    if (t == -1.0 && PyErr_Occurred()) {
        Py_DECREF(payload);
        return NULL;
    }
    self->deadline = t + self->timeout;
    PyObject *push = Py_NewRef(self->push);
    PyObject *result = Py_IS_TYPE(push, &LaneType) ? lane_push((Lane *)push, payload) : PyObject_CallOneArg(push, payload);
    Py_DECREF(push);
    Py_DECREF(payload);
    int go = result != NULL ? PyObject_IsTrue(result) : -1;
    Py_XDECREF(result);
    if (go < 0)
        return NULL;
    if (go)
        Py_RETURN_NONE; /* handled in this callback: the reader's task sleeps on */
    Py_SETREF(self->push, Py_NewRef(Py_None));
    self->pushed_back = 1;
    PyObject *self_ = (PyObject *)self;
    return PyObject_VectorcallMethod(s_wake, &self_, 1, NULL);
}

static PyObject *
connection_data_received(Connection *self, PyObject *data)
{
    if (self->at_chunk_start && !self->complete && self->push != NULL && self->push != Py_None
        && (self->error == NULL || self->error == Py_None) && self->loop != NULL && self->body != NULL
        && PyList_CheckExact(self->body) && PyList_GET_SIZE(self->body) == 0 && PyBytes_CheckExact(data)
        && PyBytes_GET_SIZE(data) <= self->step_bytes) {
        PyObject *payload = whole_chunks(data);
        if (payload != NULL)
            return connection_push(self, payload);
        if (PyErr_Occurred())
            return NULL;
    }
    PyObject *args[] = {(PyObject *)self, data};
    return PyObject_VectorcallMethod(s_read, args, 2, NULL);
}

static PyMethodDef connection_methods[] = {
    {"data_received", (PyCFunction)connection_data_received, METH_O,
     "A read: whole plain chunks to the callback taking pushes, or to `_read`."},
    {NULL},
};

static PyMemberDef connection_members[] = {
    {"push", T_OBJECT, offsetof(Connection, push), 0, NULL},
    {"body", T_OBJECT, offsetof(Connection, body), 0, NULL},
    {"error", T_OBJECT, offsetof(Connection, error), 0, NULL},
    {"loop", T_OBJECT, offsetof(Connection, loop), 0, NULL},
    {"deadline", T_DOUBLE, offsetof(Connection, deadline), 0, NULL},
    {"timeout", T_DOUBLE, offsetof(Connection, timeout), 0, NULL},
    {"step_bytes", T_PYSSIZET, offsetof(Connection, step_bytes), 0, NULL},
    {"received_any", T_BOOL, offsetof(Connection, received_any), 0, NULL},
    {"complete", T_BOOL, offsetof(Connection, complete), 0, NULL},
    {"at_chunk_start", T_BOOL, offsetof(Connection, at_chunk_start), 0, NULL},
    {"pushed_back", T_BOOL, offsetof(Connection, pushed_back), 0, NULL},
    {NULL},
};

static PyTypeObject ConnectionType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "chatsieve._lane.ConnectionBase",
    .tp_basicsize = sizeof(Connection),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The engine connection's reads, compiled (see the module's source).",
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)connection_dealloc,
    .tp_traverse = (traverseproc)connection_traverse,
    .tp_clear = (inquiry)connection_clear,
    .tp_methods = connection_methods,
    .tp_members = connection_members,
};

static PyObject *
module_event_id(PyObject *module, PyObject *data)
{
    if (!PyBytes_Check(data)) {
        PyErr_SetString(PyExc_TypeError, "event_id(data): data must be bytes");
        return NULL;
    }
    const char *p = PyBytes_AS_STRING(data);
    return PyLong_FromLong(event_id(p, p + PyBytes_GET_SIZE(data)));
}

static PyMethodDef module_methods[] = {
    {"event_id", (PyCFunction)module_event_id, METH_O,
     "The token id of a vLLM event's data read without objects (see the source), or -1."},
    {NULL},
};

static struct PyModuleDef lane_module = {PyModuleDef_HEAD_INIT, "chatsieve._lane",
                                         "The server's text lane, compiled.", -1, module_methods};

PyMODINIT_FUNC
PyInit__lane(void)
{
#define INTERN(variable, name)                                                                        \
    if ((variable = PyUnicode_InternFromString(name)) == NULL)                                        \
        return NULL;
    NAMES(INTERN)
    if ((one = PyLong_FromLong(1)) == NULL)
        return NULL;
    if (PyType_Ready(&LaneType) < 0 || PyType_Ready(&ConnectionType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&lane_module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Lane", (PyObject *)&LaneType) < 0
        || PyModule_AddObjectRef(m, "ConnectionBase", (PyObject *)&ConnectionType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
