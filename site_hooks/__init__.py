"""MkDocs hooks: page macros that pull formulas, test outcomes and numbers from their single sources."""
