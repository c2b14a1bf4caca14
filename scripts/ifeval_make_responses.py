#!/usr/bin/env python3
"""Generates synthetic IFEval responses that probe every checker near its decision boundary.

No model is needed: for each prompt, responses are assembled from a pool of awkward snippets
(abbreviations, ellipses, quotes, contractions, capitals, scripts other than Latin, odd
whitespace) and then shaped for each of the prompt's instructions so that counts land just
below, on, or just above the threshold, markers are present or slightly wrong, and wrappers
(quotes, JSON, title, sections, ******) are right or nearly right. Deterministic: the same
input gives the same output, byte for byte.

Usage: ifeval_make_responses.py INPUT_DATA OUT [PER_PROMPT]
"""
import json
import random
import sys

ABBREV_SNIPPETS = [
    "Dr. Smith met Mr. Jones at 5 p.m. on Jan. 3rd.",
    "The U.S. economy grew by 3.5 percent, e.g. in Q3.",
    "Prof. Lee (of MIT) said: \"It works.\" Then he left.",
    "We paid $3.88 for it... Was it worth it?",
    "See No. 5 and pp. 10-12, i.e. the appendix.",
    "J. S. Bach wrote it. The U.S.A. and the U.K. agreed.",
    "It costs 1,000 dollars. 2. The second item is cheaper.",
    "Wait . . . what happened?! Nobody knows.",
    "“Really?” she asked. ‘Yes,’ he said.",
    "«Bonjour», dit-il. Il partit.",
    "The St. Louis office opened in Sept. 1999. Its CEO, Mr. T. Brown, Jr., spoke.",
    "I can't and won't; they'll see. It's O'Neil's car.",
    "CANNOT stop, gonna go, wanna see it, 'tis fine.",
    "The meeting ended at 10 a.m. Everyone left early.",
    "Visit www.example.com or mail info@example.org now.",
    "He scored 9.5/10 -- amazing -- and the crowd cheered!",
    "The temperature was -5 degrees. It was cold.",
    "(This is a parenthetical sentence.) Next one starts here.",
    "Item one... item two.... item three.",
    "The results (see Fig. 2) were clear. However, more work is needed.",
    "Ms. Davis vs. Corp. Inc. was settled. The Ltd. company paid.",
    "He said \"Stop!\" and ran. \"Why?\" I asked.",
    "Use the --verbose flag; it's helpful. Really helpful!",
    "NASA's budget rose. The FBI and CIA declined to comment.",
    "It was a WELL-KNOWN fact that R&D costs rose in the U.S. last year.",
    "i think this is fine. it really is.",
    "Version 2.0.1 was released on 12.05.2020. Upgrade now.",
    "What? No! Yes?! Maybe...",
    "A. Lincoln and G. Washington were presidents. Both are famous.",
    "The café served crème brûlée. Naïve guests loved it.",
]

PLAIN_SENTENCES = [
    "The weather was pleasant and the streets were quiet.",
    "Our team finished the project ahead of schedule.",
    "Many people enjoy reading books in the evening.",
    "This plan has three clear steps and a simple budget.",
    "The river flows through the old town toward the sea.",
    "She opened the window and listened to the birds.",
    "Good design makes complex tools feel simple.",
    "They walked home after the concert ended.",
    "The report covers costs, risks and next steps.",
    "Every morning he drinks a cup of green tea.",
    "the cat slept on the warm windowsill all day.",
    "We should test the idea before we build it.",
    "History teaches us to be patient and curious.",
    "A small garden can feed a family in summer.",
    "The museum opens at nine and closes at five.",
]

FOREIGN = {
    "de": ["Das Wetter ist heute sehr schön und die Straßen sind ruhig.", "Wir haben das Projekt früher als geplant abgeschlossen.", "Viele Menschen lesen am Abend gern ein gutes Buch."],
    "fr": ["Le temps est très agréable aujourd'hui et les rues sont calmes.", "Nous avons terminé le projet avant la date prévue.", "Beaucoup de gens aiment lire le soir."],
    "es": ["El tiempo es muy agradable hoy y las calles están tranquilas.", "Terminamos el proyecto antes de lo previsto."],
    "it": ["Il tempo è molto bello oggi e le strade sono tranquille.", "Abbiamo finito il progetto prima del previsto.", "Molte persone amano leggere la sera."],
    "pt": ["O tempo está muito agradável hoje e as ruas estão calmas.", "Terminamos o projeto antes do prazo previsto.", "Muitas pessoas gostam de ler à noite."],
    "ru": ["Сегодня очень хорошая погода, и улицы спокойны.", "Мы закончили проект раньше срока.", "Многие люди любят читать по вечерам."],
    "bg": ["Времето днес е много хубаво и улиците са тихи.", "Завършихме проекта преди крайния срок.", "Много хора обичат да четат вечер."],
    "fi": ["Sää on tänään erittäin kaunis ja kadut ovat hiljaisia.", "Saimme projektin valmiiksi etuajassa.", "Monet ihmiset lukevat mielellään iltaisin."],
    "sw": ["Hali ya hewa ni nzuri sana leo na barabara ziko kimya.", "Tulimaliza mradi kabla ya wakati uliopangwa.", "Watu wengi hupenda kusoma vitabu jioni."],
    "vi": ["Hôm nay thời tiết rất đẹp và đường phố yên tĩnh.", "Chúng tôi đã hoàn thành dự án trước thời hạn.", "Nhiều người thích đọc sách vào buổi tối."],
    "ar": ["الطقس جميل جدا اليوم والشوارع هادئة.", "لقد أنهينا المشروع قبل الموعد المحدد.", "كثير من الناس يحبون القراءة في المساء."],
    "fa": ["امروز هوا بسیار خوب است و خیابان ها آرام هستند.", "ما پروژه را زودتر از موعد تمام کردیم.", "بسیاری از مردم دوست دارند شب ها کتاب بخوانند."],
    "ur": ["آج موسم بہت اچھا ہے اور سڑکیں پرسکون ہیں۔", "ہم نے منصوبہ وقت سے پہلے مکمل کر لیا۔", "بہت سے لوگ شام کو کتاب پڑھنا پسند کرتے ہیں۔"],
    "hi": ["आज मौसम बहुत अच्छा है और सड़कें शांत हैं।", "हमने परियोजना समय से पहले पूरी कर ली।", "बहुत से लोग शाम को किताबें पढ़ना पसंद करते हैं।"],
    "mr": ["आज हवामान खूप छान आहे आणि रस्ते शांत आहेत.", "आम्ही प्रकल्प वेळेआधी पूर्ण केला.", "अनेक लोकांना संध्याकाळी पुस्तके वाचायला आवडतात."],
    "ne": ["आज मौसम धेरै राम्रो छ र सडकहरू शान्त छन्।", "हामीले परियोजना समयभन्दा अगाडि सकायौं।", "धेरै मानिसहरू साँझ किताब पढ्न मन पराउँछन्।"],
    "bn": ["আজ আবহাওয়া খুব সুন্দর এবং রাস্তাগুলো শান্ত।", "আমরা নির্ধারিত সময়ের আগেই প্রকল্পটি শেষ করেছি।", "অনেক মানুষ সন্ধ্যায় বই পড়তে ভালোবাসে।"],
    "gu": ["આજે હવામાન ખૂબ સરસ છે અને રસ્તાઓ શાંત છે.", "અમે પ્રોજેક્ટ સમય પહેલાં પૂર્ણ કર્યો.", "ઘણા લોકોને સાંજે પુસ્તકો વાંચવાનું ગમે છે."],
    "pa": ["ਅੱਜ ਮੌਸਮ ਬਹੁਤ ਵਧੀਆ ਹੈ ਅਤੇ ਸੜਕਾਂ ਸ਼ਾਂਤ ਹਨ।", "ਅਸੀਂ ਪ੍ਰੋਜੈਕਟ ਸਮੇਂ ਤੋਂ ਪਹਿਲਾਂ ਪੂਰਾ ਕਰ ਲਿਆ।", "ਬਹੁਤ ਸਾਰੇ ਲੋਕ ਸ਼ਾਮ ਨੂੰ ਕਿਤਾਬਾਂ ਪੜ੍ਹਨਾ ਪਸੰਦ ਕਰਦੇ ਹਨ।"],
    "ta": ["இன்று வானிலை மிகவும் நன்றாக உள்ளது, தெருக்கள் அமைதியாக உள்ளன.", "நாங்கள் திட்டத்தை நேரத்திற்கு முன்பே முடித்தோம்."],
    "te": ["ఈ రోజు వాతావరణం చాలా బాగుంది మరియు వీధులు ప్రశాంతంగా ఉన్నాయి.", "మేము ప్రాజెక్టును గడువుకు ముందే పూర్తి చేసాము."],
    "kn": ["ಇಂದು ಹವಾಮಾನ ತುಂಬಾ ಚೆನ್ನಾಗಿದೆ ಮತ್ತು ರಸ್ತೆಗಳು ಶಾಂತವಾಗಿವೆ.", "ನಾವು ಯೋಜನೆಯನ್ನು ಸಮಯಕ್ಕಿಂತ ಮೊದಲೇ ಮುಗಿಸಿದ್ದೇವೆ."],
    "ko": ["오늘은 날씨가 매우 좋고 거리가 조용합니다.", "우리는 예정보다 일찍 프로젝트를 끝냈습니다.", "많은 사람들이 저녁에 책 읽는 것을 좋아합니다."],
    "th": ["วันนี้อากาศดีมากและถนนเงียบสงบ", "เราทำโครงการเสร็จก่อนกำหนด", "หลายคนชอบอ่านหนังสือในตอนเย็น"],
    "zh": ["今天天气很好，街道很安静。", "我们提前完成了这个项目。", "很多人喜欢在晚上读书。"],
    "ja": ["今日はとても良い天気で、通りは静かです。", "私たちは予定より早くプロジェクトを終えました。"],
    "el": ["Ο ΣΊΣΥΦΟΣ ανέβαζε την πέτρα. Ο καιρός είναι ωραίος σήμερα.", "ΟΔΥΣΣΕΥΣ και ΑΧΙΛΛΕΥΣ."],
    "tr": ["İstanbul çok güzel bir şehirdir. Bugün hava çok ılık.", "IĞDIR ve İZMİR büyük şehirlerdir."],
}

ODD_BITS = [
    "\u00a0", "\u2003", "\u3000", "\t", "\r\n", "\x1c", "\u200b", "\u2028", "\u0085", "  ", "\n\n\n",
    "🙂", "–", "—", "…", "ǅ", "ﬁ", "K", "ſ", "ı", "İ", "ß", "_", "½", "٣", "Ⅻ", "²", "₂",
]

CAPS_WORDS = ["NASA", "USA", "U.S.A.", "CANNOT", "OK", "A-OK", "R&D", "CO2", "FAQ", "NATO's",
              "I", "A", "ÉCOLE", "ΣΟΦΙΑ", "HELLO-WORLD", "WOW!", "ǅEMAL", "DON'T", "IT'S", "X1"]

JSON_BODIES = [
    '{"name": "Alice", "age": 30, "tags": ["a", "b"]}',
    '{"value": NaN, "inf": Infinity, "neg": -Infinity}',
    '{"a": 1,}',
    "{'single': 'quotes'}",
    '[1, 2, 3.5e10, -0, 1E-5, true, false, null]',
    '{"nested": {"deep": [{"x": "y\\u00e9\\n"}]}}',
    '{"bad": 01}',
    '{"text": "line\nbreak"}',
    '"just a string"',
    '12345678901234567890123',
    '{"a": 1} trailing',
    '{"a": .5}',
    '{"a": 1.}',
    '{"a": "\\x41"}',
    '{"a": "\\ud83d\\ude00"}',
    '{}',
    '',
    '{"k": [1, 2}',
    ' \t{"spaced" : [ ] }\r\n',
    '{"a": -}',
    '{"a": tru}',
    '// comment\n{"a": 1}',
    '[NaN, -NaN]',
    '{"t": "tab\there"}',
    '{"u": "\\u00"}',
    '[1E+2, 1e5, 0.0e-0]',
    '[[[[[[[[[[{"deep": [[]]}]]]]]]]]]]',
    '{"a": 1}\n```\n```',
    '\ufeff{"bom": 1}',
]


class Gen:
    def __init__(self, rng, item):
        self.r = rng
        self.item = item

    def pick(self, seq):
        return self.r.choice(seq)

    def sentence(self):
        x = self.r.random()
        if x < 0.45:
            return self.pick(ABBREV_SNIPPETS)
        if x < 0.85:
            return self.pick(PLAIN_SENTENCES)
        return self.pick(self.pick(list(FOREIGN.values())))

    def sentences(self, n):
        return " ".join(self.sentence() for _ in range(n))

    def near(self, target, spread=2):
        return max(0, target + self.r.randint(-spread, spread))

    def oddify(self, text):
        """Sprinkles odd whitespace or characters into a text, sometimes."""
        if self.r.random() < 0.25:
            words = text.split(" ")
            for _ in range(self.r.randint(1, 3)):
                i = self.r.randrange(len(words))
                words[i] = words[i] + self.pick(ODD_BITS)
            text = " ".join(words)
        return text


def word_body(g, n_words):
    """Roughly n_words words of plain English (counted as the reference counts \\w+ runs)."""
    words = []
    pool = " ".join(PLAIN_SENTENCES).split()
    while len(words) < n_words:
        w = g.pick(pool)
        if g.r.random() < 0.05:
            w = g.pick(["don't", "e-mail", "3.14", "naïve", "well_known", "नमस्ते", "co-op", "U.S.", "I'm"])
        words.append(w)
    return " ".join(words[:n_words])


def shape(g, iid, kw, blocks, wrappers, filters):
    """Adds blocks or registers transformations that aim at (or just miss) one instruction."""
    r = g.r
    hit = r.random() < 0.6
    if iid == "punctuation:no_comma":
        if hit:
            filters.append(lambda t: t.replace(",", ""))
    elif iid == "detectable_format:number_highlighted_sections":
        n = g.near(kw["num_highlights"], 1)
        parts = []
        for i in range(n):
            parts.append(g.pick(["*highlighted section %d*" % i, "**Bold part %d**" % i, "*  *",
                                 "* key idea *", "*x*", "***triple***", "*a\nb*"]))
        blocks.append(" ".join(parts) + " " + g.sentence())
    elif iid == "length_constraints:number_words":
        target = kw["num_words"]
        blocks.append(word_body(g, g.near(target, 3) if hit else r.randint(5, target * 2)))
    elif iid == "detectable_content:number_placeholders":
        n = g.near(kw["num_placeholders"], 1)
        ph = [g.pick(["[name]", "[address]", "[ ]", "[]", "[date of birth]", "[[nested]", "[a\nb]", "[x] [y]"])
              for _ in range(n)]
        blocks.append("Dear " + ", ".join(ph) + ". " + g.sentence())
    elif iid == "combination:repeat_prompt":
        p = kw["prompt_to_repeat"]
        v = r.random()
        if v < 0.5:
            start = p
        elif v < 0.65:
            start = p.upper()
        elif v < 0.8:
            start = "Sure, here is the request:\n" + p
        else:
            start = p[: max(1, len(p) - 5)]
        blocks.insert(0, start)
    elif iid == "detectable_format:title":
        blocks.insert(0, g.pick(["<<A Title>>", "<<poem of joy>>", "<< >>", "<<>>", "<<<Triple>>>", "<<broken\ntitle>>",
                                 "Title: no brackets", "<<Title>> and <<Another>>"]))
    elif iid == "combination:two_responses":
        sep = g.pick(["******", "\n******\n", "*******", "***", " ****** "])
        a, b = g.sentence(), g.sentence()
        if r.random() < 0.2:
            b = a
        form = r.random()
        if form < 0.7:
            wrappers.append(lambda t, a=a, b=b, sep=sep: t + "\n" + a + sep + b)
        elif form < 0.85:
            wrappers.append(lambda t, sep=sep: sep + t + sep + g.sentence())
        else:
            wrappers.append(lambda t, sep=sep: t + sep + sep + a)
    elif iid == "change_case:english_lowercase":
        if hit:
            filters.append(lambda t: t.lower())
        elif r.random() < 0.5:
            filters.append(lambda t: t.lower() + " Except This.")
    elif iid == "change_case:english_capital":
        if hit:
            filters.append(lambda t: t.upper())
        elif r.random() < 0.5:
            filters.append(lambda t: t.upper() + " except this")
    elif iid == "change_case:capital_word_frequency":
        n = g.near(kw["capital_frequency"], 2)
        blocks.append(" ".join(g.pick(CAPS_WORDS) + " " + g.pick(["word", "thing", "and", "or"]) for _ in range(n)) + ".")
    elif iid == "detectable_format:number_bullet_lists":
        n = g.near(kw["num_bullets"], 1)
        items = []
        for i in range(n):
            items.append(g.pick(["* Point %d." % i, "- Item %d" % i, "  * indented %d" % i, "*bold start %d*" % i,
                                 "**Bold** line %d" % i, "---", "-", "*\n  next line %d" % i, "\t- tabbed %d" % i]))
        blocks.append("\n".join(items))
    elif iid == "detectable_format:constrained_response":
        blocks.insert(0, g.pick(["My answer is yes.", "My answer is no.", "My answer is maybe.", "My answer is Yes.",
                                 "my answer is no.", "My answer is yes", "I think: My answer is maybe. Indeed."]))
    elif iid == "detectable_format:json_format":
        body = g.pick(JSON_BODIES)
        if r.random() < 0.5:
            body = g.pick(["```json\n", "```JSON\n", "```Json\n", "```\n", "``` json\n", "Here:\n```json\n"]) + body + g.pick(["\n```", "```", "\n``` ", ""])
        wrappers.append(lambda t, body=body: body if r.random() < 0.8 else body + "\n" + t)
    elif iid == "detectable_format:multiple_sections":
        sp = kw["section_spliter"]
        n = g.near(kw["num_sections"], 1)
        secs = []
        for i in range(1, n + 1):
            head = g.pick([f"{sp} {i}", f"{sp}{i}", f"{sp.upper()} {i}", f"{sp} X", f"{sp.lower()} {i}", f"{sp} {i}:"])
            secs.append(head + "\n" + g.sentence())
        blocks.append("\n\n".join(secs))
    elif iid == "length_constraints:number_paragraphs":
        n = g.near(kw["num_paragraphs"], 1)
        paras = [g.sentences(r.randint(1, 2)) for _ in range(max(1, n))]
        sep = g.pick(["\n***\n", "\n\n***\n\n", " *** ", "***", "\n* * *\n"])
        text = sep.join(paras)
        if r.random() < 0.15:
            text = text + sep + sep + "tail"
        if r.random() < 0.15:
            text = sep + text + sep
        wrappers.append(lambda t, text=text: text)
    elif iid == "length_constraints:nth_paragraph_first_word":
        n = kw["num_paragraphs"] if r.random() < 0.6 else g.near(kw["num_paragraphs"], 1)
        nth = kw["nth_paragraph"]
        fw = kw["first_word"]
        paras = []
        for i in range(1, max(1, n) + 1):
            s = g.sentences(r.randint(1, 2))
            if i == nth:
                s = g.pick([fw.capitalize(), fw, fw.upper(), '"' + fw, "'" + fw, fw + ",", fw + ":", fw + "s", "The"]) + " " + s
            paras.append(s)
        sep = g.pick(["\n\n", "\n\n\n", "\n", "\n\n \n\n"])
        wrappers.append(lambda t, paras=paras, sep=sep: sep.join(paras))
    elif iid == "detectable_content:postscript":
        m = kw["postscript_marker"]
        ps = g.pick([m, m.lower(), "P. S.", "P.S", "p.p.s", "P. P. S.", "PS:", "P.S.", "P.P.S"])
        blocks.append(ps + " " + g.sentence())
    elif iid == "startend:end_checker":
        phrase = kw["end_phrase"]
        ending = g.pick([phrase, phrase.lower(), phrase + '"', phrase + " \n", phrase + " Bye.", phrase.upper(),
                         phrase[:-1], '"' + phrase + '"'])
        wrappers.append(lambda t, ending=ending: t + "\n" + ending)
    elif iid == "startend:quotation":
        q = g.pick(['"%s"', ' "%s" \n', '"%s', '“%s”', '%s"', '""', '"'])
        wrappers.append(lambda t, q=q: q.replace("%s", t) if "%s" in q else q)
    elif iid == "keywords:forbidden_words":
        for w in kw["forbidden_words"]:
            if r.random() < 0.4:
                form = g.pick([w, w.upper(), w.capitalize(), w + "s", "un" + w, w + "'s", w + "_x", "x" + w])
                blocks.append(g.sentence() + " " + form + " " + g.sentence())
    elif iid == "keywords:existence":
        for w in kw["keywords"]:
            if r.random() < 0.7:
                blocks.append(g.pick([w, w.upper(), w.title(), w + "ing"]) + " " + g.sentence())
    elif iid == "keywords:frequency":
        n = g.near(kw["frequency"], 1)
        k = kw["keyword"]
        blocks.append(" ".join(g.pick([k, k.upper(), k.capitalize(), k + "s"]) + " " + g.pick(["is", "and", "of"])
                               for _ in range(n)) + ".")
    elif iid == "keywords:letter_frequency":
        letter = kw["letter"]
        n = g.near(kw["let_frequency"], 2)
        # Strip the letter from the body sometimes, then add n of it (some upper case).
        if r.random() < 0.5:
            filters.append(lambda t, letter=letter: t.replace(letter, "").replace(letter.upper(), ""))
        blocks.append(" ".join((letter.upper() if r.random() < 0.3 else letter) * 1 for _ in range(n)))
    elif iid == "language:response_language":
        lang = kw["language"]
        if hit and lang in FOREIGN:
            wrappers.append(lambda t, lang=lang: " ".join(r.sample(FOREIGN[lang], len(FOREIGN[lang]))))
        else:
            other = g.pick(list(FOREIGN))
            wrappers.append(lambda t, other=other: " ".join(FOREIGN[other]) + " " + g.sentence())
    elif iid == "length_constraints:number_sentences":
        n = g.near(kw["num_sentences"], 2)
        blocks.append(g.sentences(max(0, min(n, 70))))
    else:
        raise ValueError(iid)


def shaped_response(g):
    item = g.item
    blocks = [g.sentences(g.r.randint(1, 4))]
    wrappers, filters = [], []
    for iid, kw in zip(item["instruction_id_list"], item["kwargs"]):
        shape(g, iid, kw, blocks, wrappers, filters)
    text = g.pick(["\n\n", "\n", " "]).join(g.oddify(b) for b in blocks)
    for w in wrappers:
        text = w(text)
    for f in filters:
        text = f(text)
    if g.r.random() < 0.2:
        text = g.pick(["Sure! Here it is:\n", "**Answer**\n", "  \n", "*"]) + text
    if g.r.random() < 0.2:
        text = text + g.pick(["\nHope this helps!", "\n*", "\n\n", " ", "\n---"])
    return text


TRICKY_CHARS = [
    "ſ", "K", "ı", "İ", "ǅ", "Σ", "ς", "\x1c", "\x1f", "\x85", "\u2028", "\u00a0", "\u0301", "\u094d",
    "\u093e", "“", "”", "‘", "’", "«", "»", "--", "...", ". . .", "'", '"', "`", "``", "''", "\t", "\r",
    "\n", "\n\n", "*", "**", "[", "]", "<<", ">>", ",", ";", ":", "?!", "!", "(", ")", "-", "_", "ß",
]

LOOKALIKE = {"i": ["ı", "İ"], "s": ["ſ"], "k": ["K"], "e": ["é", "e\u0301"], "a": ["à"]}


def lookalike(g, word):
    """A keyword with one letter swapped for a character `re`'s IGNORECASE may or may not equate."""
    options = [i for i, ch in enumerate(word) if ch.lower() in LOOKALIKE]
    if not options:
        return word.upper()
    i = g.pick(options)
    return word[:i] + g.pick(LOOKALIKE[word[i].lower()]) + word[i + 1:]


def adversarial_response(g):
    """A shaped response with keyword look-alikes and tricky characters spliced in."""
    text = shaped_response(g)
    extra = []
    for iid, kw in zip(g.item["instruction_id_list"], g.item["kwargs"]):
        words = kw.get("forbidden_words") or kw.get("keywords") or ([kw["keyword"]] if "keyword" in kw else [])
        for w in words:
            form = lookalike(g, w)
            extra.append(g.pick([form, form + "\u094d", "\u0915" + form, form + "_", "'" + form + "'"]))
        if "letter" in kw:
            extra.append(g.pick(["İİ", "KK", "ſ", "ǅ"]))
    pieces = list(text)
    for _ in range(g.r.randint(1, 6)):
        pieces.insert(g.r.randint(0, len(pieces)), g.pick(TRICKY_CHARS))
    for e in extra:
        pieces.insert(g.r.randint(0, len(pieces)), " " + e + " ")
    return "".join(pieces)


def noise_response(g):
    kind = g.r.random()
    if kind < 0.1:
        return g.pick(["", " ", "\n", "*", "\"", "\"\"", "a", "...", "******", "<<>>", "[x]", "P.S.", "\u00a0", "\x1c", "Σ", "ǅ"])
    parts = []
    for _ in range(g.r.randint(1, 8)):
        x = g.r.random()
        if x < 0.5:
            parts.append(g.sentence())
        elif x < 0.7:
            parts.append(g.pick(ODD_BITS))
        elif x < 0.85:
            parts.append(g.pick(CAPS_WORDS))
        else:
            parts.append(g.pick(["\n", "\n\n", "\n***\n", "\n* a\n- b\n", " *hi* ", " [p] ", "\nSECTION 1\n"]))
    text = " ".join(parts)
    if g.r.random() < 0.3:
        text = text.upper() if g.r.random() < 0.5 else text.lower()
    return text


def main(input_path, out_path, per_prompt=9):
    per_prompt = int(per_prompt)
    with open(input_path, encoding="utf-8") as f:
        items = [json.loads(line) for line in f if line.strip()]
    with open(out_path, "w", encoding="utf-8") as out:
        for item in items:
            g = Gen(random.Random(item["key"]), item)
            for i in range(per_prompt):
                if i == per_prompt - 1:
                    response = noise_response(g)
                elif i >= per_prompt - 3:
                    response = adversarial_response(g)
                else:
                    response = shaped_response(g)
                # Most rows name their prompt by key, some by text (both must be supported).
                ref = {"prompt": item["prompt"]} if i == 1 else {"key": item["key"]}
                out.write(json.dumps({**ref, "response": response}, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
