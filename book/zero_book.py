"""A Sphinx extension for the book: every page loads each script once.

sphinx-thebe 0.3.1 adds its inline settings script (`const THEBE_JS_URL = ...`) twice under
Sphinx 7.4, and a second `const` of the same name is an error in every page's console.
"""


def unique_scripts(app, pagename, templatename, context, doctree) -> None:
    """Drop repeated scripts from a page: the same file, or the same inline body, at any priority."""
    seen, kept = set(), []
    for script in context.get("script_files", []):
        key = (str(script.filename or ""), tuple(sorted(script.attributes.items())))  # inline: None or ""
        if key not in seen:
            seen.add(key)
            kept.append(script)
    context["script_files"] = kept


def setup(app):
    app.connect("html-page-context", unique_scripts, priority=900)  # after every handler that adds scripts
    return {"parallel_read_safe": True, "parallel_write_safe": True}
